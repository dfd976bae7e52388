"""Workflows completed per second end to end, and StartWorkflow-to-completed latency.

Every service is its own process on the same machine as the broker and the database: one
orchestrator, one claimer, one ticker. Each workflow (`bench.two_steps`) runs two no-op activities
with a 1 ms durable timer between them (the SDK refuses 0), so it takes four decisions, two JobDue through the
claimer and a StartTimer/TimerFired round trip through the ticker. The driver publishes
`--workflows` StartWorkflow commands at once and waits for every workflow to complete.

Throughput: workflows / (last completion - first start), both from the orchestrator's rows
(database clock). Latency: completion minus the moment the driver published the StartWorkflow.

    .venv/bin/python bench/orchestrator_e2e.py --runs 3 --workflows 2000
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
from _common import REPO, RESULTS, bench_topics, fingerprint, process_cpu_seconds, scratch_database

from slotflow.commands import build_command
from slotflow.contracts import StartWorkflow
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import create_pool
from slotflow.settings import KafkaSettings, PostgresSettings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """`python -m slotflow_<name>` with the benchmark's modules and its own metrics port."""

    def __init__(self, name: str, kafka: KafkaSettings, dsn: str, log_dir: Path, **settings: Any) -> None:
        self.name = name
        self.port = _free_port()
        prefix = f"SLOTFLOW_{name.upper()}_"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update(
            {
                "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
                "SLOTFLOW_PG_DSN": dsn,
                f"{prefix}METRICS_PORT": str(self.port),
                "PYTHONPATH": str(REPO / "bench"),
            }
        )
        env.update({f"{prefix}{k.upper()}": str(v) for k, v in settings.items()})
        self._log: IO[bytes] = (log_dir / f"{name}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"slotflow_{name}"], cwd=REPO, env=env, stdout=self._log, stderr=self._log
        )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"{self.name} exited with {self.proc.returncode}")
                try:
                    await client.get(f"http://127.0.0.1:{self.port}/metrics")
                    return
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
        raise SystemExit(f"{self.name} not ready in {timeout} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_run(count: int, log_dir: Path) -> dict[str, float]:
    async with bench_topics() as kafka, scratch_database() as dsn:
        services = [
            Service("ticker", kafka, dsn, log_dir),
            Service("claimer", kafka, dsn, log_dir, handler_modules="claimer_handlers"),
            Service("orchestrator", kafka, dsn, log_dir, workflow_modules="orchestrator_flows"),
        ]
        try:
            for service in services:
                await service.wait_ready()
            await asyncio.sleep(3)  # consumer groups settle
            pool = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
            published: dict[str, datetime] = {}
            async with Producer(kafka, client_id="bench-driver") as producer:
                items = []
                for i in range(count):
                    message = StartWorkflow(
                        workflow_id=f"wf-{i}", workflow_type="bench.two_steps", input={"i": i}
                    )
                    spec, envelope = build_command(message, command_id=f"start-{i}", source="bench")
                    items.append((kafka.topic(spec), envelope))
                for start in range(0, count, 500):
                    chunk = items[start : start + 500]
                    await producer.send_many(chunk)
                    now = datetime.now(UTC)
                    for _, envelope in chunk:
                        published[envelope.key] = now
            print(f"published {len(published)} starts", flush=True)
            deadline = time.monotonic() + max(120.0, count / 5)
            done = 0
            while time.monotonic() < deadline:
                done = await pool.fetchval(
                    "SELECT count(*) FROM orchestrator.workflows WHERE status = 'completed'"
                )
                if done >= count:
                    break
                failed = await pool.fetchval(
                    "SELECT count(*) FROM orchestrator.workflows WHERE status = 'failed'"
                )
                if failed:
                    raise SystemExit(f"{failed} workflows failed")
                await asyncio.sleep(0.25)
            else:
                raise SystemExit(f"only {done} of {count} workflows completed in time")
            rows = await pool.fetch("SELECT workflow_id, started_at, closed_at FROM orchestrator.workflows")
            cpu = {s.name: process_cpu_seconds(s.proc.pid) for s in services}
            if os.environ.get("BENCH_SHOW_METRICS"):
                async with httpx.AsyncClient() as client:
                    text = (await client.get(f"http://127.0.0.1:{services[2].port}/metrics")).text
                wanted = ("decision_seconds_sum", "decision_seconds_count", "decisions_total")
                print(os.linesep.join(line for line in text.splitlines() if any(w in line for w in wanted)))
            await pool.close()
        finally:
            for service in services:
                service.stop()
    first = min(r["started_at"] for r in rows)
    last = max(r["closed_at"] for r in rows)
    latencies = [(r["closed_at"] - published[r["workflow_id"]]).total_seconds() for r in rows]
    return {
        **{f"{name}_cpu_ms_per_workflow": seconds * 1000 / count for name, seconds in cpu.items()},
        "load_average_1m": os.getloadavg()[0],
        "workflows_per_second": count / (last - first).total_seconds(),
        "latency_p50_seconds": percentile(latencies, 0.50),
        "latency_p99_seconds": percentile(latencies, 0.99),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=2000)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        logs = os.environ.get("BENCH_LOG_DIR", scratch)
        for run in range(args.runs):
            result = await one_run(args.workflows, Path(logs))
            results.append(result)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()), flush=True)
    summary = {
        "benchmark": "orchestrator_e2e",
        "workflows": args.workflows,
        "runs": results,
        "median": {k: statistics.median(r[k] for r in results) for k in results[0]},
        "machine": fingerprint(),
    }
    print(json.dumps(summary["median"], indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"orchestrator_e2e-{int(time.time())}.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
