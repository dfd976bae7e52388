"""`make demo`: the whole system on the real Kafka and PostgreSQL, end to end, in about a minute.

It starts a ticker, two claimers (with the payout handler from examples/payouts), the DLQ service
and the api as separate processes, in a fresh topic namespace and a fresh database, then:

1. creates a payout schedule firing every 2 seconds and a schedule whose payload is refused
   (a permanent error), through the HTTP API;
2. SIGKILLs one claimer halfway, so its partitions and leases move to the other;
3. shows the runs, the slot audit, the DLQ and the payout ledger: one payout per slot, none twice.

Everything it prints comes from the running services (HTTP API) and the ledger table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from slotflow.kafka.admin import describe_cluster, ensure_topics
from slotflow.settings import KafkaSettings, PostgresSettings

ROOT = Path(__file__).resolve().parents[1]
PAYOUTS = ROOT / "examples" / "payouts"
RUN_SECONDS = 24


def say(text: str = "") -> None:
    print(text, flush=True)  # noqa: T201


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_database(dsn: str, database: str) -> str:
    return f"{dsn.rsplit('/', 1)[0]}/{database}"


class Stack:
    """The slotflow services as child processes sharing one namespace and database."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, module: str, *args: str, extra: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(  # noqa: S603 - our own interpreter and modules
            [sys.executable, "-m", module, *args],
            env={**self.env, **(extra or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def kill(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 25
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()


async def wait_ready(client: httpx.AsyncClient, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    raise SystemExit("the api did not become ready; see the logs printed above")


async def create_schedule(client: httpx.AsyncClient, schedule_id: str, payload: dict[str, Any]) -> None:
    body = {
        "schedule_id": schedule_id,
        "definition": {
            "spec": {"kind": "cron", "expression": "*/2 * * * * *", "timezone": "Europe/Berlin"},
            "handler": "payouts.pay_merchants",
            "payload": payload,
            "misfire": {"policy": "fire_all"},
            "overlap": "allow",
            "retry": {"base": "PT0.2S", "cap": "PT1S", "max_attempts": 3},
            "tags": ["money-moving"],
        },
    }
    response = await client.post("/v1/schedules", json=body, params={"wait": 20})
    response.raise_for_status()
    say(f"  {schedule_id}: command {response.json()['command_id']} -> {response.json()['status']}")


async def main() -> int:
    kafka = KafkaSettings()
    postgres = PostgresSettings()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")

    say("== 1. The infrastructure is real")
    info = await describe_cluster(kafka.bootstrap)
    produce = info.api("Produce")
    say(
        f"  Kafka at {kafka.bootstrap}: cluster id {info.cluster_id}, brokers {list(info.broker_ids)}, "
        f"Produce API v{produce.min_version if produce else '?'}-v{produce.max_version if produce else '?'}"
    )
    admin = await asyncpg.connect(postgres.dsn)
    try:
        say(f"  PostgreSQL: {await admin.fetchval('SELECT version()')}")
        database = f"slotflow_demo_{stamp}"
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    dsn = with_database(postgres.dsn, database)
    namespace = f"demo-{stamp}"
    settings = kafka.model_copy(update={"topic_namespace": namespace})
    await ensure_topics(kafka.bootstrap, settings.topics())
    ledger = await asyncpg.connect(dsn)
    await ledger.execute((PAYOUTS / "ledger.sql").read_text())
    say(f"  fresh database {database}, topic namespace {namespace}")

    logs = ROOT / ".devstack" / "demo-logs" / stamp
    logs.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PAYOUTS), os.environ.get("PYTHONPATH", "")]),
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": namespace,
        "SLOTFLOW_PG_DSN": dsn,
        "SLOTFLOW_TICKER_METRICS_PORT": "0",
        "SLOTFLOW_CLAIMER_HANDLER_MODULES": "payouts",
        "SLOTFLOW_CLAIMER_LEASE_TTL_SECONDS": "4",
        "SLOTFLOW_API_PORT": str(port),
    }
    stack = Stack(env, logs)
    say(f"\n== 2. Starting ticker, two claimers, dlq and api (logs in {logs.relative_to(ROOT)})")
    stack.start("ticker", "slotflow_ticker")
    stack.start("claimer-a", "slotflow_claimer")
    stack.start("claimer-b", "slotflow_claimer")
    stack.start("dlq", "slotflow_dlq")
    stack.start("api", "slotflow_api", "serve")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await wait_ready(client)
            say(f"  api ready on http://127.0.0.1:{port} (dashboard at /ui/)")

            say("\n== 3. Two schedules, every 2 seconds, created over HTTP")
            started = datetime.now(UTC)
            await create_schedule(client, "merchant-42", {"merchant_id": "m-42", "amount_cents": 1250})
            await create_schedule(client, "merchant-broken", {"merchant_id": "m-0", "amount_cents": -1})

            await asyncio.sleep(RUN_SECONDS / 2)
            say("\n== 4. SIGKILL claimer-a mid-stream: its partitions and leases move to claimer-b")
            stack.kill("claimer-a")
            await asyncio.sleep(RUN_SECONDS / 2)
            # Pause so the last slots settle before the report.
            await client.post("/v1/schedules/merchant-42/pause", json={"reason": "demo over"})
            await client.post("/v1/schedules/merchant-broken/pause", json={"reason": "demo over"})
            await asyncio.sleep(6)

            await report(client, ledger, started)
    finally:
        stack.stop_all()
        await ledger.close()
    say(f"\nDone. Services stopped; database {database} and namespace {namespace} are kept for a look.")
    return 0


async def report(client: httpx.AsyncClient, ledger: asyncpg.Connection[Any], started: datetime) -> None:
    runs = (await client.get("/v1/schedules/merchant-42/runs", params={"limit": 500})).json()["items"]
    say(f"\n== 5. Runs of merchant-42 (read model over HTTP): {len(runs)}")
    say(f"  {'run id':<42} {'state':<12} {'attempts':>8} {'token':>6}  owner")
    for run in runs[-8:]:
        attempts = len(run.get("attempts") or [])
        say(
            f"  {run['run_id']:<42} {run['state']:<12} {attempts:>8} {run.get('fence_token') or '-':>6}  "
            f"{(run.get('owner') or '-')[:30]}"
        )

    ended = datetime.now(UTC)
    audit = (
        await client.get(
            "/v1/audit",
            params={
                "schedule": "merchant-42",
                "from": (started - timedelta(seconds=2)).isoformat(),
                "to": (ended - timedelta(seconds=8)).isoformat(),
            },
        )
    ).json()
    say(f"\n== 6. Slot audit for merchant-42: expected {audit.get('expected')}, {audit.get('summary')}")

    dead = (await client.get("/v1/dlq", params={"limit": 5})).json()["items"]
    say(f"\n== 7. DLQ: {len(dead)} parked (the refused payout is permanent: never retried)")
    for item in dead[:3]:
        say(f"  {item.get('dead_letter_id')}: {item.get('reason')} ({item.get('job_id')})")

    paid = await ledger.fetchrow(
        "SELECT count(*) AS rows, count(DISTINCT run_id) AS slots, coalesce(max(fence_token), 0) AS top "
        "FROM payouts_ledger"
    )
    if paid is None:  # an aggregate always returns its one row
        raise SystemExit("the payout ledger query returned no row")
    say(
        f"\n== 8. Payout ledger: {paid['rows']} payouts for {paid['slots']} distinct slots "
        f"(highest fence token {paid['top']}) -> {'one payout per slot' if paid['rows'] == paid['slots'] else 'DUPLICATES'}"
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
