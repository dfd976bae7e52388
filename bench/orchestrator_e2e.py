"""Workflows completed per second end to end, StartWorkflow-to-completed latency, and recovery.

Every service is its own process on the same machine as the broker and the database: one
orchestrator, one claimer, one ticker. Each workflow (`bench.two_steps`) runs two no-op activities
with a zero-length durable timer between them: three decisions, two JobDue through the claimer
(the timer is fired by the decision that started it). The driver publishes `--workflows`
StartWorkflow commands at once and waits for every workflow to complete.

Throughput: workflows / (last completion - first start), both from the orchestrator's rows
(database clock). Latency: completion minus the moment the driver published the StartWorkflow.
CPU per workflow of each service process and of the PostgreSQL backends serving the run's
database; transactions committed in it per workflow.

Arms: `--arm NAME=CHECKOUT` runs the services from another checkout of the repository (its
libs and services first on PYTHONPATH), and the runs alternate between arms, so a before/after
comparison shares one stretch of the box's (noisy) load:

    git worktree add ../slotflow-before <commit>
    .venv/bin/python bench/orchestrator_e2e.py --runs 3 --workflows 2000 \
        --arm before=../slotflow-before:BENCH_TIMER_SECONDS=0.001 --arm after=.

(`:VAR=VALUE` after the path sets an environment variable for that arm's services; a checkout
from before zero-length sleeps refuses a zero timer, so it runs a 1 ms one.)

Recovery (`--recovery 10000`): that many `bench.waits` workflows are started and left open, the
orchestrator is SIGKILLed and a new one started at once (`--standby`: a second orchestrator is
already in the group and takes the killed one's shards); the driver signals every workflow at the
moment of the kill. Recovery time: kill to the first signal applied on every shard (the new owner
deciding everywhere); drain: kill to all of them completed.
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
from _common import REPO, RESULTS, bench_topics, fingerprint, process_cpu_seconds, scratch_database

from slotflow.contracts import SignalWorkflow, StartWorkflow
from slotflow.contracts.routing import build_command
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool, create_pool
from slotflow.settings import KafkaSettings, PostgresSettings


@dataclass(frozen=True)
class Arm:
    """Where one arm's services come from, and the environment they get on top."""

    name: str
    checkout: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "Arm":
        name, _, rest = text.partition("=")
        path, *assignments = rest.split(":")
        env = dict(a.split("=", 1) for a in assignments)
        checkout = Path(path or ".").resolve()
        if not (checkout / "libs" / "slotflow" / "src").is_dir():
            raise SystemExit(f"arm {name}: {checkout} is not a checkout of the repository")
        return cls(name or checkout.name, checkout, env)

    def pythonpath(self) -> str:
        # The library, and slotflow-base where the checkout has it.
        paths = sorted((self.checkout / "libs").glob("*/src"))
        paths += sorted((self.checkout / "services").glob("*/src"))
        return os.pathsep.join(str(p) for p in [*paths, REPO / "bench"])


CURRENT = Arm("current", REPO)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """`python -m slotflow_<name>` with the benchmark's modules and its own metrics port."""

    def __init__(
        self, name: str, kafka: KafkaSettings, dsn: str, log_dir: Path, arm: Arm = CURRENT, **settings: Any
    ) -> None:
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
                "PYTHONPATH": arm.pythonpath(),
                **arm.env,
            }
        )
        env.update({f"{prefix}{k.upper()}": str(v) for k, v in settings.items()})
        self._log: IO[bytes] = (log_dir / f"{arm.name}-{name}.log").open("ab")
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

    def kill(self) -> None:
        """SIGKILL: no shutdown step runs (a crash)."""
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


async def postgres_cpu_seconds(pool: Pool, database: str) -> float:
    """CPU so far of every PostgreSQL backend connected to ``database`` (the server is local)."""
    pids = await pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", database)
    return sum(process_cpu_seconds(r["pid"]) for r in pids)


async def commits(pool: Pool, database: str) -> int:
    return int(await pool.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_run(count: int, log_dir: Path, arm: Arm = CURRENT) -> dict[str, float]:
    async with bench_topics() as kafka, scratch_database() as dsn:
        database = dsn.rsplit("/", 1)[1].split("?", 1)[0]
        services = [
            Service("ticker", kafka, dsn, log_dir, arm),
            Service("claimer", kafka, dsn, log_dir, arm, handler_modules="claimer_handlers"),
            Service("orchestrator", kafka, dsn, log_dir, arm, workflow_modules="orchestrator_flows"),
        ]
        try:
            for service in services:
                await service.wait_ready()
            await asyncio.sleep(3)  # consumer groups settle
            pool = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
            cpu_before = {s.name: process_cpu_seconds(s.proc.pid) for s in services}
            pg_before = await postgres_cpu_seconds(pool, database)
            commits_before = await commits(pool, database)
            published = await publish_starts(kafka, count, "bench.two_steps")
            print(f"[{arm.name}] published {len(published)} starts", flush=True)
            await wait_closed(pool, count, timeout=max(120.0, count / 5))
            rows = await pool.fetch("SELECT workflow_id, started_at, closed_at FROM orchestrator.workflows")
            cpu = {s.name: process_cpu_seconds(s.proc.pid) - cpu_before[s.name] for s in services}
            cpu["postgres"] = await postgres_cpu_seconds(pool, database) - pg_before
            transactions = await commits(pool, database) - commits_before
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
        "transactions_per_workflow": transactions / count,
        "load_average_1m": os.getloadavg()[0],
        "workflows_per_second": count / (last - first).total_seconds(),
        "latency_p50_seconds": percentile(latencies, 0.50),
        "latency_p99_seconds": percentile(latencies, 0.99),
    }


async def publish_starts(kafka: KafkaSettings, count: int, workflow_type: str) -> dict[str, datetime]:
    """Publish ``count`` StartWorkflow commands; when each was published, by workflow id."""
    published: dict[str, datetime] = {}
    async with Producer(kafka, client_id="bench-driver") as producer:
        items = []
        for i in range(count):
            message = StartWorkflow(workflow_id=f"wf-{i}", workflow_type=workflow_type, input={"i": i})
            spec, envelope = build_command(message, command_id=f"start-{i}", source="bench")
            items.append((kafka.topic(spec), envelope))
        for start in range(0, count, 500):
            chunk = items[start : start + 500]
            await producer.send_many(chunk)
            now = datetime.now(UTC)
            for _, envelope in chunk:
                published[envelope.key] = now
    return published


async def wait_closed(pool: Pool, count: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        done = await pool.fetchval("SELECT count(*) FROM orchestrator.workflows WHERE status = 'completed'")
        if done >= count:
            return
        failed = await pool.fetchval("SELECT count(*) FROM orchestrator.workflows WHERE status = 'failed'")
        if failed:
            raise SystemExit(f"{failed} workflows failed")
        await asyncio.sleep(0.1)
    raise SystemExit(f"only {done} of {count} workflows completed in time")


async def recovery_run(
    count: int, log_dir: Path, arm: Arm, session_timeout_ms: int, *, standby: bool = False
) -> dict[str, float]:
    """``count`` open workflows, the orchestrator SIGKILLed, a new one started at once (or, with
    ``standby``, a second one already running in the group takes its shards over)."""
    async with bench_topics() as kafka, scratch_database() as dsn:
        orchestrator_settings = {
            "workflow_modules": "orchestrator_flows",
            "session_timeout_ms": session_timeout_ms,
        }
        first = Service("orchestrator", kafka, dsn, log_dir, arm, **orchestrator_settings)
        services = [first]
        try:
            await first.wait_ready()
            if standby:
                services.append(Service("orchestrator", kafka, dsn, log_dir, arm, **orchestrator_settings))
                await services[-1].wait_ready()
            await asyncio.sleep(3)
            pool = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
            await publish_starts(kafka, count, "bench.waits")
            deadline = time.monotonic() + max(300.0, count / 5)
            opened = 0
            while time.monotonic() < deadline:
                opened = await pool.fetchval("SELECT count(*) FROM orchestrator.workflows")
                if opened >= count:
                    break
                await asyncio.sleep(0.25)
            else:
                raise SystemExit(f"only {opened} of {count} workflows opened in time")
            shards = await pool.fetchval("SELECT count(DISTINCT shard) FROM orchestrator.workflows")
            print(f"[{arm.name}] {count} workflows open on {shards} shards; SIGKILL", flush=True)
            killed = datetime.now(UTC)
            first.kill()
            if not standby:
                services.append(Service("orchestrator", kafka, dsn, log_dir, arm, **orchestrator_settings))
            async with Producer(kafka, client_id="bench-signals") as producer:
                items = []
                for i in range(count):
                    message = SignalWorkflow(workflow_id=f"wf-{i}", signal="go")
                    spec, envelope = build_command(message, command_id=f"go-{i}", source="bench")
                    items.append((kafka.topic(spec), envelope))
                for start in range(0, count, 500):
                    await producer.send_many(items[start : start + 500])
            await wait_closed(pool, count, timeout=max(300.0, count / 5))
            per_shard = await pool.fetch(
                "SELECT shard, min(closed_at) AS first FROM orchestrator.workflows GROUP BY shard"
            )
            drained = await pool.fetchval("SELECT max(closed_at) FROM orchestrator.workflows")
            # The last shard lease taken: when the new owner of every shard was known.
            taken = await pool.fetchval("SELECT max(acquired_at) FROM orchestrator.shard_leases")
            await pool.close()
        finally:
            for service in services:
                service.stop()
    recovered = max(r["first"] for r in per_shard)
    return {
        "open_workflows": float(count),
        "standby": float(standby),
        "session_timeout_ms": float(session_timeout_ms),
        "load_average_1m": os.getloadavg()[0],
        "leases_taken_seconds": (taken - killed).total_seconds(),
        "recovery_seconds": (recovered - killed).total_seconds(),
        "drain_seconds": (drained - killed).total_seconds(),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument(
        "--arm", action="append", type=Arm.parse, default=[], help="NAME=CHECKOUT[:VAR=VALUE...]"
    )
    parser.add_argument("--recovery", type=int, default=0, help="open workflows for the recovery run")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--standby", action="store_true", help="recovery: a second orchestrator takes over")
    args = parser.parse_args()
    arms: list[Arm] = args.arm or [CURRENT]
    results: dict[str, list[dict[str, float]]] = {arm.name: [] for arm in arms}
    with tempfile.TemporaryDirectory() as scratch:
        logs = Path(os.environ.get("BENCH_LOG_DIR", scratch))
        for run in range(args.runs):
            # Alternating arms: each pair of runs shares the box's load of that moment.
            for arm in arms:
                if args.recovery:
                    result = await recovery_run(
                        args.recovery, logs, arm, args.session_timeout_ms, standby=args.standby
                    )
                else:
                    result = await one_run(args.workflows, logs, arm)
                results[arm.name].append(result)
                shown = ", ".join(f"{k} {v:.3f}" for k, v in result.items())
                print(f"run {run + 1} [{arm.name}]: {shown}", flush=True)
    medians = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in results.items()
    }
    summary: dict[str, Any] = {
        "benchmark": "orchestrator_recovery" if args.recovery else "orchestrator_e2e",
        "workflows": args.recovery or args.workflows,
        "arms": {arm.name: {"checkout": str(arm.checkout), "env": arm.env} for arm in arms},
        "runs": results,
        "median": medians,
        "machine": fingerprint(),
    }
    if len(arms) > 1:
        base = medians[arms[0].name]
        summary["ratio_to_first_arm"] = {
            arm.name: {k: medians[arm.name][k] / base[k] for k in base if base[k]} for arm in arms[1:]
        }
    print(json.dumps({k: summary[k] for k in ("median", "ratio_to_first_arm") if k in summary}, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{summary['benchmark']}-{int(time.time())}.json").write_text(
        json.dumps(summary, indent=2) + "\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
