"""CPU per history event of a decision's outbox row: built from the models, or spliced.

    .venv/bin/python bench/orchestrator_outbound.py [--rounds 7] [--events 20000]

In one process, no I/O: the eight history events of one `bench.two_steps` workflow (the
orchestrator benchmark's), stepped by the real runtime, are turned into their outbox rows again
and again, two ways in alternating rounds:

- models: `encoded(Staged(topic, wrap(event, ...)))`, the way every row was built before: the
  event dumped to a dict, the envelope model validated around it, then serialised;
- spliced: `Outbound.history_row`, the envelope's head serialised and the event's JSON spliced in.

Both arms also dump the event's JSON once, as the decision does for the history table. CPU time
(`time.thread_time`), medians of the rounds; the rows are checked to be equal first.
"""

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orchestrator_flows

from slotflow.contracts import HistoryEvent, Message, RunCompleted, StartWorkflow, history_event_id, wrap
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.issuers import RunRecord
from slotflow.pg.outbox import Staged, encoded
from slotflow.settings import KafkaSettings
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow_orchestrator.outbound import SOURCE, Outbound
from slotflow_orchestrator.stepping import Input, Row, step
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WF = "wf-1"


def _input(message: Message, id: str, seq: int) -> Input:
    return Input(seq, wrap(message, id=id, key=WF, source="bench", occurred_at=NOW), message)


def _done(sequence: int, seq: int) -> Input:
    message = RunCompleted(
        run_id=f"{WF}/{sequence}",
        job_id=WF,
        slot=NOW,
        attempt=1,
        fence_token=1,
        owner="bench",
        workflow_id=WF,
        sequence=sequence,
        result=None,
        started_at=NOW,
        finished_at=NOW,
    )
    return _input(message, f"r{sequence}", seq)


def workflow_history() -> list[HistoryEvent]:
    """The history one benchmark workflow appends over its three decisions."""
    workflow_code = RuntimeWorkflowCode(WorkflowRuntime([orchestrator_flows.TwoSteps], cache_size=10))
    start = StartWorkflow(workflow_id=WF, workflow_type="bench.two_steps", input={"i": 1})
    history = list(step(WF, None, [], [_input(start, "s", 1)], workflow_code=workflow_code, now=NOW).events)
    row = Row("bench.two_steps", "running")
    for seq in (2, 3):
        scheduled = [e.sequence for e in history if e.message_type == "workflow.activity_scheduled"][-1]
        # The claimer's record of the run backs the outcome (slotflow.issuers).
        run_id = f"{WF}/{scheduled}"
        records = {run_id: RunRecord(run_id, "completed", 1, 1, "bench.noop")}
        history += step(
            WF, row, history, [_done(scheduled, seq)], workflow_code=workflow_code, now=NOW, records=records
        ).events
    return history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=20_000, help="rows built per round and arm")
    args = parser.parse_args()

    kafka = KafkaSettings()
    outbound, topic = Outbound(kafka), kafka.topic(WORKFLOW_HISTORY)
    history = workflow_history()

    def models() -> None:
        for event in history:
            event.model_dump_json()
            envelope = wrap(
                event, id=history_event_id(WF, event.sequence), key=WF, source=SOURCE, occurred_at=NOW
            )
            encoded(Staged(topic, envelope))

    def spliced() -> None:
        for event in history:
            outbound.history_row(WF, event, event.model_dump_json(), NOW)

    for event in history:
        envelope = wrap(
            event, id=history_event_id(WF, event.sequence), key=WF, source=SOURCE, occurred_at=NOW
        )
        if outbound.history_row(WF, event, event.model_dump_json(), NOW) != encoded(Staged(topic, envelope)):
            raise SystemExit(f"the spliced row of {event.message_type} differs from the models' row")

    loops = max(1, args.events // len(history))
    arms: dict[str, Callable[[], None]] = {"models": models, "spliced": spliced}
    per_event: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, build in arms.items():
            began = time.thread_time()
            for _ in range(loops):
                build()
            per_event[name].append((time.thread_time() - began) / (loops * len(history)) * 1e6)
    old, new = (statistics.median(per_event[name]) for name in arms)
    print("| history events a workflow | models µs/event | spliced µs/event | ratio | µs saved a workflow |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {len(history)} | {old:.1f} | {new:.1f} | {new / old:.2f} | {(old - new) * len(history):.0f} |")


if __name__ == "__main__":
    main()
