"""How long a workflow query takes with many open workflows (docs/benchmarks.md, "Queries").

    .venv/bin/python bench/orchestrator_queries.py [--runs 3] [--workflows 10000] [--queries 2000] [--concurrency 8]

A fresh topic namespace's history topic is filled with `--workflows` open `bench.queried`
workflows (each waiting on its first activity, as the runtime records it), and a scratch database
is rebuilt from it (`slotflow-orchestrator rebuild`: the tables an orchestrator would hold). One
orchestrator then runs in this process with its query listener on, holding every shard, and the
api's query path (`slotflow_api.workflow_queries.Queries`: the `query_route` lookup, the HTTP call
to the listener, the history read and replay there) asks `--queries` queries of workflows drawn
at random, one at a time, then the same number `--concurrency` at a time. A third pass asks 100
workflows over and over (the runtime's query cache answers them without a replay).

Not included: the client's HTTP hop to the api and the api's own routing (a FastAPI request,
about 1 ms here). Reported per run: p50, p90, p99 and max in ms of each pass, and the concurrent
pass's queries/s; medians of --runs. JSON in bench/results/orchestrator_queries.json.
"""

import argparse
import asyncio
import json
import random
import socket
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
from _common import RESULTS, bench_topics, fingerprint, percentile, publish_histories, scratch_database

from slotflow import workflow
from slotflow.contracts import HistoryEvent, WorkflowStarted
from slotflow.contracts.topics import WORKFLOW_COMMANDS
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow_api.workflow_queries import Queries
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.config import OrchestratorSettings, Settings
from slotflow_orchestrator.rebuild import rebuild
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@workflow.defn(name="bench.queried")
class Queried:
    """Waits on one activity; answers `progress` with what it knows."""

    def __init__(self) -> None:
        self.stage = "new"
        self.order: dict[str, Any] = {}

    @workflow.run
    async def run(self, order: dict[str, Any]) -> int:
        self.order = order
        self.stage = "packing"
        await workflow.execute_activity("bench.pack", order)
        self.stage = "done"
        return 1

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return {"stage": self.stage, "lines": len(self.order.get("lines", []))}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def fill(kafka: KafkaSettings, workflows: int) -> int:
    """Publish ``workflows`` open histories; returns the events written."""
    runtime = WorkflowRuntime([Queried])

    def histories() -> Iterator[list[HistoryEvent]]:
        for n in range(workflows):
            workflow_id = f"q-{n}"
            history: list[HistoryEvent] = [
                WorkflowStarted(
                    workflow_id=workflow_id,
                    sequence=1,
                    workflow_type="bench.queried",
                    input={"lines": ["mug", "plate", "bowl"][: 1 + n % 3]},
                    command_id=f"start-{workflow_id}",
                )
            ]
            history.extend(runtime.replay(history, now=T0).events)
            yield history

    return await publish_histories(kafka, histories(), at=T0, client_id="bench-queries")


def summary(latencies: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in latencies]
    return {
        "p50_ms": percentile(ms, 0.50),
        "p90_ms": percentile(ms, 0.90),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": max(ms),
    }


async def timed(queries: Queries, workflow_id: str) -> float:
    began = time.perf_counter()
    answer = await queries.ask(workflow_id, "progress", None, timeout=10)
    took = time.perf_counter() - began
    if answer.result["stage"] != "packing":
        raise SystemExit(f"{workflow_id} answered {answer.result}")
    return took


async def one_run(kafka: KafkaSettings, args: argparse.Namespace) -> dict[str, float]:
    code = RuntimeWorkflowCode(WorkflowRuntime([Queried], cache_size=10_000, query_cache_size=1_000))
    async with scratch_database() as dsn:
        port = _free_port()
        settings = Settings(
            orchestrator=OrchestratorSettings(query_port=port, poll_timeout_ms=50),
            kafka=kafka,
            postgres=PostgresSettings(dsn=dsn),
        )
        report = await rebuild(settings, workflow_code=code)
        if report.problems:
            raise SystemExit(f"rebuild reported problems: {report.problems[:5]}")
        service = OrchestratorService(settings, workflow_code=code)
        stop = asyncio.Event()
        running = asyncio.create_task(service.run(stop))
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        producer = Producer(kafka, client_id="bench-queries-api")
        await producer.start()
        queries = Queries(
            pool, producer, schema="orchestrator", commands_topic=kafka.topic(WORKFLOW_COMMANDS), token=None
        )
        try:
            shards = await producer.partition_count(kafka.topic(WORKFLOW_COMMANDS))
            for _ in range(600):
                held = service.leases is not None and len(service.leases.held) == shards
                if held and service.queries is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("the orchestrator did not take every shard within 60 s")
            ids = [f"q-{n}" for n in range(args.workflows)]
            draw = random.Random(7)
            for workflow_id in draw.sample(ids, 200):  # warm-up: connections, code paths
                await timed(queries, workflow_id)
            one_at_a_time = [await timed(queries, draw.choice(ids)) for _ in range(args.queries)]
            gate = asyncio.Semaphore(args.concurrency)

            async def gated(workflow_id: str) -> float:
                async with gate:
                    return await timed(queries, workflow_id)

            began = time.perf_counter()
            concurrent = await asyncio.gather(*(gated(draw.choice(ids)) for _ in range(args.queries)))
            wall = time.perf_counter() - began
            hot = ids[:100]
            repeated = [await timed(queries, hot[n % 100]) for n in range(args.queries)]
        finally:
            await queries.close()
            await producer.stop()
            await pool.close()
            stop.set()
            await running
    out: dict[str, float] = {}
    for name, latencies in (
        ("sequential", one_at_a_time),
        ("concurrent", concurrent),
        ("repeated", repeated),
    ):
        out.update({f"{name}_{k}": v for k, v in summary(list(latencies)).items()})
    out["concurrent_per_second"] = args.queries / wall
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    connection = await asyncpg.connect(PostgresSettings().dsn)
    try:
        server = str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()
    machine = fingerprint(server)
    async with bench_topics() as kafka:
        events = await fill(kafka, args.workflows)
        print(f"history topic: {events} events of {args.workflows} open workflows", file=sys.stderr)
        runs = []
        for n in range(args.runs):
            result = await one_run(kafka, args)
            runs.append(result)
            print(f"run {n + 1}: {json.dumps({k: round(v, 2) for k, v in result.items()})}", file=sys.stderr)
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "orchestrator_queries.json").write_text(
        json.dumps({"machine": machine, "args": vars(args), "runs": runs, "median": med}, indent=2)
    )
    for name in ("sequential", "concurrent", "repeated"):
        print(
            f"| {name} | {med[f'{name}_p50_ms']:.1f} | {med[f'{name}_p90_ms']:.1f} "
            f"| {med[f'{name}_p99_ms']:.1f} | {med[f'{name}_max_ms']:.1f} |"
        )
    print(f"concurrent ({args.concurrency} at a time): {med['concurrent_per_second']:.0f} queries/s")


if __name__ == "__main__":
    asyncio.run(main())
