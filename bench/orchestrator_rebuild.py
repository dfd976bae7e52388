"""How fast `slotflow-orchestrator rebuild` restores the orchestrator's schema from the topics.

    .venv/bin/python bench/orchestrator_rebuild.py [--runs 3] [--workflows 10000] [--steps 3] [--open-every 10]

The history topic of a fresh topic namespace is filled with `--workflows` histories recorded by the
workflow runtime itself (`bench.rebuild`: `--steps` activities one after another, so 2 + 2 x steps
events, the last `WorkflowCompleted`); every `--open-every`-th workflow is cut after its first
`ActivityScheduled`, open with an activity pending. Then, per run, in a new scratch database: the
rebuild (`slotflow_orchestrator.rebuild.rebuild`, in this process: read the history, events and
input topics, write rows, history, inbox, reissued JobDue, and decide every open workflow once
more), then `check` (tables against the topic). Reported: seconds, history events/s and
workflows/s of the rebuild, and the check's seconds; medians of --runs. JSON in
bench/results/orchestrator_rebuild.json.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from _common import RESULTS, bench_topics, fingerprint, publish_histories, scratch_database

from slotflow import workflow
from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    HistoryEvent,
    WorkflowStarted,
)
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow_orchestrator.config import OrchestratorSettings, Settings
from slotflow_orchestrator.rebuild import check, rebuild
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@workflow.defn(name="bench.rebuild")
class Steps:
    """Runs `steps` activities one after another."""

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> int:
        total = 0
        for i in range(int(spec["steps"])):
            result = await workflow.execute_activity("bench.step", {"i": i})
            total += int(result["n"])
        return total


def record(workflow_id: str, steps: int, runtime: WorkflowRuntime) -> list[HistoryEvent]:
    """The whole history of one `bench.rebuild` run, as the runtime records it."""
    history: list[HistoryEvent] = [
        WorkflowStarted(
            workflow_id=workflow_id,
            sequence=1,
            workflow_type="bench.rebuild",
            input={"steps": steps},
            command_id=f"start-{workflow_id}",
        )
    ]
    now = T0
    while True:
        decision = runtime.replay(history, now=now)
        history.extend(decision.events)
        if decision.closed:
            return history
        now += timedelta(seconds=1)
        for event in decision.events:
            if isinstance(event, ActivityScheduled):
                history.append(
                    ActivityCompleted(
                        workflow_id=workflow_id,
                        sequence=len(history) + 1,
                        scheduled_sequence=event.sequence,
                        result={"n": 1},
                    )
                )


async def fill(kafka: KafkaSettings, *, workflows: int, steps: int, open_every: int) -> tuple[int, int]:
    """Publish the histories; returns (events, open workflows)."""
    runtime = WorkflowRuntime([Steps], cache_size=1)
    opened = 0

    def histories() -> Iterator[list[HistoryEvent]]:
        nonlocal opened
        for n in range(workflows):
            history = record(f"rb-{n}", steps, runtime)
            if open_every and n % open_every == 0:
                history = history[
                    : next(i for i, e in enumerate(history) if isinstance(e, ActivityScheduled)) + 1
                ]
                opened += 1
            yield history

    events = await publish_histories(kafka, histories(), at=T0, client_id="bench-rebuild")
    return events, opened


async def one_run(kafka: KafkaSettings, workflow_code: RuntimeWorkflowCode) -> dict[str, float]:
    async with scratch_database() as dsn:
        settings = Settings(
            orchestrator=OrchestratorSettings(),
            kafka=kafka,
            postgres=PostgresSettings(dsn=dsn),
        )
        began = time.monotonic()
        report = await rebuild(settings, workflow_code=workflow_code)
        rebuilt = time.monotonic() - began
        if report.problems:
            raise SystemExit(f"rebuild reported problems: {report.problems[:5]}")
        began = time.monotonic()
        verdict = await check(settings)
        checked = time.monotonic() - began
        if not verdict.agree:
            raise SystemExit(f"check found differences: {verdict.differences[:5]}")
        return {
            "seconds": rebuilt,
            "events": report.history_events,
            "workflows": report.workflows,
            "open": report.open_workflows,
            "events_per_second": report.history_events / rebuilt,
            "workflows_per_second": report.workflows / rebuilt,
            "check_seconds": checked,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--open-every", type=int, default=10)
    args = parser.parse_args()
    connection = await asyncpg.connect(PostgresSettings().dsn)
    try:
        server = str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()
    machine = fingerprint(server)
    workflow_code = RuntimeWorkflowCode(WorkflowRuntime([Steps], cache_size=10_000))
    async with bench_topics() as kafka:
        events, opened = await fill(
            kafka, workflows=args.workflows, steps=args.steps, open_every=args.open_every
        )
        print(
            f"history topic: {events} events of {args.workflows} workflows ({opened} open)", file=sys.stderr
        )
        runs = []
        for n in range(args.runs):
            result = await one_run(kafka, workflow_code)
            runs.append(result)
            print(f"run {n + 1}: {json.dumps({k: round(v, 2) for k, v in result.items()})}", file=sys.stderr)
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "orchestrator_rebuild.json").write_text(
        json.dumps({"machine": machine, "args": vars(args), "runs": runs, "median": med}, indent=2)
    )
    print(
        f"| {args.workflows} workflows, {int(med['events'])} events, {int(med['open'])} open "
        f"| {med['seconds']:.1f} s | {med['events_per_second']:.0f} events/s "
        f"| {med['workflows_per_second']:.0f} workflows/s | check {med['check_seconds']:.1f} s |"
    )


if __name__ == "__main__":
    asyncio.run(main())
