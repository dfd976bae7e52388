"""Projection lag of the api: event produced (broker acknowledged) -> visible through the HTTP API.

    .venv/bin/python bench/api_projection_lag.py [--rate 1500] [--seconds 10] [--runs 3]

Against the devstack (SLOTFLOW_KAFKA_BOOTSTRAP, SLOTFLOW_PG_DSN), in a fresh topic namespace and a
fresh database per run. The api runs as its own process (uvicorn with the projector embedded). This
process produces background load at `--rate` events/s (each run: JobDue, RunStarted, RunCompleted
on their topics) and, for one run in 10, notes when its RunCompleted was acknowledged by the broker
and when the run is committed as completed in the read model the API serves (one query for every
pending sample each 20 ms, so the probe is not itself the load); the median time of a
`GET /v1/runs/{id}` (what the HTTP layer adds) is reported beside it. Reported per run: p50/p99/max lag,
events produced per second, and the same for an idle baseline (one event at a time, no load) so
the load's cost is a same-run ratio. Results: stdout (Markdown) and bench/results/api_projection_lag.json.
"""

import argparse
import asyncio
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import asyncpg
import httpx

from slotflow.contracts import JobDue, RunCompleted, RunStarted, wrap
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS
from slotflow.core.identity import run_id
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings, PostgresSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
#: How often a sampled run is looked up: the lag's resolution, and the probe's own load.
POLL_SECONDS = 0.02


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Run:
    def __init__(self, kafka: KafkaSettings, base_url: str, offset: int) -> None:
        self.kafka = kafka
        self.base_url = base_url
        self.offset = offset
        self.lags: list[float] = []

    def envelopes(self, job: str, slot: datetime) -> list[tuple[str, object]]:
        rid = run_id(job, slot)
        now = datetime.now(UTC)
        base = {"run_id": rid, "job_id": job, "slot": slot, "attempt": 1, "fence_token": 1, "owner": "bench"}
        due = JobDue(run_id=rid, job_id=job, slot=slot, handler="bench.noop")
        started = RunStarted(**base, started_at=now)  # type: ignore[arg-type]
        completed = RunCompleted(**base, started_at=now, finished_at=now)  # type: ignore[arg-type]
        return [
            (self.kafka.topic(JOBS_DUE), wrap(due, id=rid, key=job, source="bench", occurred_at=now)),
            (
                self.kafka.topic(RUN_EVENTS),
                wrap(started, id=f"{rid}/1/started", key=job, source="bench", occurred_at=now),
            ),
            (
                self.kafka.topic(RUN_EVENTS),
                wrap(completed, id=f"{rid}/1/completed", key=job, source="bench", occurred_at=now),
            ),
        ]

    async def poll_visible(
        self, pool: "asyncpg.Pool[asyncpg.Record]", pending: dict[str, float], done: asyncio.Event
    ) -> None:
        """One light query per tick for every sampled run not yet visible (the probe must not be the load)."""
        while not (done.is_set() and not pending):
            if pending:
                rows = await pool.fetch(
                    "SELECT run_id FROM api.runs WHERE run_id = ANY($1::text[]) AND state = 'completed'",
                    list(pending),
                )
                now = time.monotonic()
                for row in rows:
                    self.lags.append(now - pending.pop(row["run_id"]))
            await asyncio.sleep(POLL_SECONDS)

    async def load(
        self,
        producer: Producer,
        pool: "asyncpg.Pool[asyncpg.Record]",
        *,
        rate: float,
        seconds: float,
        sample_every: int,
    ) -> float:
        """Produce runs at ``rate`` events/s; returns events actually produced per second."""
        pending: dict[str, float] = {}
        done = asyncio.Event()
        poller = asyncio.create_task(self.poll_visible(pool, pending, done))
        slot0 = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(days=self.offset)
        runs_per_tick = max(1, int(rate / 3 / 20))  # 20 ticks per second
        sent = 0
        started = time.monotonic()
        tick = 0
        while time.monotonic() - started < seconds:
            batch = []
            sampled = []
            for i in range(runs_per_tick):
                n = tick * runs_per_tick + i
                job = f"job{n % 64}"
                slot = slot0 + timedelta(seconds=n)
                batch += self.envelopes(job, slot)
                if n % sample_every == 0:
                    sampled.append(run_id(job, slot))
            await producer.send_many(batch)  # type: ignore[arg-type]
            acked = time.monotonic()
            sent += len(batch)
            pending.update(dict.fromkeys(sampled, acked))
            tick += 1
            delay = started + tick / 20 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elapsed = time.monotonic() - started
        done.set()
        await asyncio.wait_for(poller, timeout=120)
        return sent / elapsed


async def http_latency(base_url: str, run: str, token: str, count: int = 50) -> float:
    """Median time of GET /v1/runs/{id} for a projected run: what the API adds on top (its token
    check included: authentication is on, as deployed)."""
    times = []
    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        for _ in range(count):
            begin = time.monotonic()
            response = await http.get(f"{base_url}/v1/runs/{quote(run, safe='')}")
            times.append(time.monotonic() - begin)
            if response.json()["state"] != "completed":
                raise SystemExit(f"run {run} is not completed in the API: {response.text}")
    return statistics.median(times)


async def one_run(args: argparse.Namespace) -> dict[str, float]:
    base_kafka = KafkaSettings()
    kafka = base_kafka.model_copy(update={"topic_namespace": f"bench_{uuid.uuid4().hex[:8]}"})
    await ensure_topics(kafka.bootstrap, kafka.topics())
    pg = PostgresSettings()
    database = f"bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg.dsn)
    await admin.execute(f'CREATE DATABASE "{database}"')
    await admin.close()
    dsn = pg.dsn.rsplit("/", 1)[0] + f"/{database}"
    port = _free_port()
    token = "sft_" + secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
        "SLOTFLOW_PG_DSN": dsn,
        "SLOTFLOW_API_PORT": str(port),
        "SLOTFLOW_API_BOOTSTRAP_TOKEN": token,
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "slotflow_api", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                try:
                    if (await http.get(f"{base_url}/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
        async with Producer(kafka, client_id="bench") as producer:
            # Warm-up: the projector joins its group and the first fetches settle before measuring.
            await Run(kafka, base_url, 0).load(producer, pool, rate=60, seconds=1, sample_every=1)
            idle = Run(kafka, base_url, 1)
            await idle.load(producer, pool, rate=60, seconds=3, sample_every=1)
            loaded = Run(kafka, base_url, 2)
            produced = await loaded.load(
                producer, pool, rate=args.rate, seconds=args.seconds, sample_every=10
            )
        await pool.close()
        get_ms = await http_latency(base_url, run_id("job0", datetime(2030, 1, 3, tzinfo=UTC)), token) * 1000
    finally:
        server.terminate()
        server.wait(timeout=30)
        admin = await asyncpg.connect(pg.dsn)
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    return {
        "idle_p50_ms": statistics.median(idle.lags) * 1000,
        "idle_p99_ms": _percentile(idle.lags, 0.99) * 1000,
        "load_p50_ms": statistics.median(loaded.lags) * 1000,
        "load_p99_ms": _percentile(loaded.lags, 0.99) * 1000,
        "load_max_ms": max(loaded.lags) * 1000,
        "samples": len(loaded.lags),
        "events_per_s": produced,
        "http_get_p50_ms": get_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1500.0, help="background events per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [asyncio.run(one_run(args)) for _ in range(args.runs)]
    medians = {key: statistics.median(r[key] for r in results) for key in results[0]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    fingerprint = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}"
    (RESULTS / "api_projection_lag.json").write_text(
        json.dumps(
            {"args": vars(args), "runs": results, "medians": medians, "machine": fingerprint}, indent=2
        )
    )
    print(f"machine: {fingerprint}; rate {args.rate:.0f} events/s for {args.seconds:.0f} s; {args.runs} runs")
    print(
        "| run | idle p50 ms | idle p99 ms | load p50 ms | load p99 ms | load max ms | samples | events/s | GET p50 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate([*results, medians]):
        name = "median" if i == len(results) else str(i + 1)
        print(
            f"| {name} | {r['idle_p50_ms']:.1f} | {r['idle_p99_ms']:.1f} | {r['load_p50_ms']:.1f} | "
            f"{r['load_p99_ms']:.1f} | {r['load_max_ms']:.1f} | {r['samples']:.0f} | {r['events_per_s']:.0f} | "
            f"{r['http_get_p50_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
