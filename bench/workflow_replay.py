"""Replay rate of the workflow runtime for 1k/10k/50k-event histories, versus decoding them only.

    .venv/bin/python bench/workflow_replay.py [--runs 3] [--sizes 1000,10000,50000]

Pure CPU, no broker or database. For each size N a workflow that runs activities in a loop (an
activity is two events, ActivityScheduled and ActivityCompleted; every 50th step also sleeps, a
TimerStarted and a WorkflowTimerFired) is recorded to N events by the runtime itself. Then, per run:

- decode:  the history's JSON envelopes (as the history topic holds them) parsed into typed events,
           `REGISTRY.parse(decode(record))` per event: what reading a history costs before any
           code runs. The baseline.
- replay:  `Replayer.replay(events)` on the typed events: the whole run re-executed against its
           history, every decision matched. Reported as events/s and as a ratio to decode.
- step:    the orchestrator's steady state: a cached `WorkflowRuntime` (cache_size=1) that has
           seen the history up to step k is handed one more ActivityCompleted and decides the next
           step; the figure is CPU time per decide, at the end of an N-event history.
- cold:    one uncached `replay` at the end of the history (a crash-restart, or a cache miss):
           a full replay plus the new decision.

Times are CPU time of this process (`time.process_time`), medians of --runs runs; the recorded
history is `gc.freeze()`d. Results: Markdown on stdout, JSON in bench/results/workflow_replay.json.
"""

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import cpu_model

from slotflow import workflow
from slotflow.contracts import (
    REGISTRY,
    ActivityCompleted,
    ActivityScheduled,
    HistoryEvent,
    TimerStarted,
    WorkflowStarted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.contracts.codec import decode, encode
from slotflow.workflow import Replayer
from slotflow.workflow.runtime import WorkflowRuntime

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
CEILING = 1_000_000
SLEEP_EVERY = 50


@workflow.defn(name="bench.loop")
class Loop:
    """Runs `steps` activities one after another, sleeping a minute every 50th."""

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> int:
        total = 0
        for i in range(int(spec["steps"])):
            result = await workflow.execute_activity("bench.step", {"i": i})
            total += int(result["n"])
            if i % SLEEP_EVERY == SLEEP_EVERY - 1:
                await workflow.sleep(timedelta(minutes=1))
        return total


def _answer(history: list[HistoryEvent], event: HistoryEvent, now: datetime) -> HistoryEvent | None:
    seq = history[-1].sequence + 1
    if isinstance(event, ActivityScheduled):
        return ActivityCompleted(
            workflow_id=event.workflow_id, sequence=seq, scheduled_sequence=event.sequence, result={"n": 1}
        )
    if isinstance(event, TimerStarted):
        return WorkflowTimerFired(
            workflow_id=event.workflow_id,
            sequence=seq,
            started_sequence=event.sequence,
            timer_id=event.timer_id,
            fired_at=now,
        )
    return None


def record(events: int) -> list[HistoryEvent]:
    """A history of about ``events`` events, still running (its last activity unanswered)."""
    # More steps than fit: the run is still going at N events, as a live workflow's history is.
    steps = events + 1000
    runtime = WorkflowRuntime([Loop], max_history_events=CEILING, cache_size=1)
    history: list[HistoryEvent] = [
        WorkflowStarted(
            workflow_id="bench-1",
            sequence=1,
            workflow_type="bench.loop",
            input={"steps": steps},
            command_id="c1",
        )
    ]
    now = T0
    while len(history) < events:
        decision = runtime.replay(history, now=now)
        history.extend(decision.events)
        if decision.closed:
            break
        now += timedelta(seconds=1)
        for event in decision.events:
            answer = _answer(history, event, now)
            if answer is not None and len(history) < events:
                history.append(answer)
    return history[:events]


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(history: list[HistoryEvent]) -> dict[str, float]:
    raw = [
        encode(wrap(e, id=f"{e.workflow_id}#{e.sequence}", key=e.workflow_id, source="bench", occurred_at=T0))
        for e in history
    ]
    # The history must end waiting on an activity, so the step measurement has something to answer.
    history = _pending_tail(history)
    n = len(history)
    replayer = Replayer([Loop], max_history_events=CEILING)

    decode_s = _cpu(lambda: [REGISTRY.parse(decode(r)) for r in raw])
    replay_s = _cpu(lambda: replayer.replay(history))
    cold_s = _cpu(lambda: WorkflowRuntime([Loop], max_history_events=CEILING).replay(history, now=T0))

    # Steady state: warm a cached runtime on the history minus its tail, then time single steps.
    runtime = WorkflowRuntime([Loop], max_history_events=CEILING, cache_size=1)
    steps = 200
    live = list(history)
    runtime.replay(live, now=T0)
    waiting: list[HistoryEvent] = [history[-1]]
    now = T0
    step_s = 0.0
    for _ in range(steps):
        now += timedelta(seconds=1)
        for event in waiting:
            answer = _answer(live, event, now)
            if answer is not None:
                live.append(answer)
        start = time.process_time()
        decision = runtime.replay(live, now=now)
        step_s += time.process_time() - start
        if not decision.events:
            raise RuntimeError("a step decided nothing: the answers did not match what the code waits for")
        live.extend(decision.events)
        waiting = list(decision.events)
    return {
        "events": n,
        "decode_events_per_s": n / decode_s,
        "replay_events_per_s": n / replay_s,
        "replay_over_decode": (n / replay_s) / (n / decode_s),
        "replay_ms": replay_s * 1000,
        "cold_decide_ms": cold_s * 1000,
        "step_us": step_s / steps * 1e6,
    }


def _pending_tail(history: list[HistoryEvent]) -> list[HistoryEvent]:
    while not isinstance(history[-1], ActivityScheduled):
        history = history[:-1]
    return history


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000,50000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    measure(record(200))  # warm-up: pydantic builds its validators on first use
    for size in sizes:
        history = record(size)
        gc.collect()
        gc.freeze()
        runs = [measure(history) for _ in range(args.runs)]
        gc.unfreeze()
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        median["events"] = runs[0]["events"]
        results.append({"size": size, "median": median, "runs": runs})
        print(f"measured {size}", file=sys.stderr)
    print(f"CPU: {cpu_model()}; Python {platform.python_version()}; runs: {args.runs} (medians)\n")
    print("| events | decode ev/s | replay ev/s | replay / decode | replay ms | cold decide ms | step µs |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in results:
        m = row["median"]
        print(
            f"| {int(m['events']):,} | {m['decode_events_per_s']:,.0f} | {m['replay_events_per_s']:,.0f} | "
            f"{m['replay_over_decode']:.2f} | {m['replay_ms']:,.1f} | {m['cold_decide_ms']:,.1f} | {m['step_us']:,.0f} |"
        )
    out = REPO / "bench" / "results" / "workflow_replay.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"at": datetime.now(UTC).isoformat(), "runs": args.runs, "results": results}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
