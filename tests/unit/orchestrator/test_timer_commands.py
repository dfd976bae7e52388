"""Every timer command the orchestrator sends passes the ticker's check and travels on the internal
timer topic (docs/ticker.md, "Timer ids"): a sleep, an activity's deadline, an execution timeout
and their cancels. A form the rule did not know would leave a workflow asleep for good."""

from datetime import timedelta

from slotflow.contracts import ActivityScheduled, CancelTimer, StartTimer, StartWorkflow
from slotflow.contracts.catalogue import TIMER_COMMAND_TYPES
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.timers import deadline_timer_id, execution_timer_id, sleep_timer_id
from slotflow.core.identity import activity_run_id
from slotflow.kafka.poison import decode_record
from slotflow.kafka.records import Record
from slotflow.pg.outbox import Staged
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.stepping import Step, TimerRequest, step
from tests.unit.orchestrator.test_due_timers import NOW, WF, item, workflow_code

KAFKA = KafkaSettings(topic_namespace="ns")
TIMER_TOPIC = "ns.slotflow.timers.commands.v1"


def timer_commands(out: Step) -> list[StartTimer | CancelTimer]:
    """The step's timer commands as the ticker decodes them (the whole poison check included)."""
    found: list[StartTimer | CancelTimer] = []
    for row in Outbound(KAFKA).rows(out, out.events, now=NOW):
        if not isinstance(row, Staged) or row.envelope.type not in {"timer.start", "timer.cancel"}:
            continue
        assert row.topic == TIMER_TOPIC
        envelope = row.envelope
        record = Record(
            row.topic,
            0,
            0,
            envelope.key.encode(),
            encode(envelope),
            tuple(envelope_headers(envelope).items()),
            None,
        )
        _, message = decode_record(record, accept=TIMER_COMMAND_TYPES)
        assert isinstance(message, StartTimer | CancelTimer)
        found.append(message)
    return found


def test_a_sleep_and_the_execution_timeout_of_a_real_decision_pass() -> None:
    begin = StartWorkflow(
        workflow_id=WF, workflow_type="test.short_sleep", input={}, execution_timeout=timedelta(hours=1)
    )
    out = step(WF, None, [], [item(begin, "c1", 1)], workflow_code=workflow_code(), now=NOW)
    assert [(type(m), m.timer_id) for m in timer_commands(out)] == [
        (StartTimer, sleep_timer_id(WF, 2)),
        (StartTimer, execution_timer_id(WF)),
    ]


def test_a_deadline_a_continued_runs_timeout_and_every_cancel_pass() -> None:
    run = activity_run_id(WF, 3)
    scheduled = ActivityScheduled(
        workflow_id=WF,
        sequence=3,
        activity="payments.capture",
        run_id=run,
        schedule_to_close_deadline=NOW + timedelta(minutes=5),
    )
    out = Step(
        WF,
        events=[scheduled],
        timers=[TimerRequest(execution_timer_id(WF, 7), NOW + timedelta(hours=1))],
        cancel_timers=[deadline_timer_id(run), sleep_timer_id(WF, 2), execution_timer_id(WF)],
    )
    assert [(type(m), m.timer_id) for m in timer_commands(out)] == [
        (StartTimer, deadline_timer_id(run)),
        (StartTimer, execution_timer_id(WF, 7)),
        (CancelTimer, deadline_timer_id(run)),
        (CancelTimer, sleep_timer_id(WF, 2)),
        (CancelTimer, execution_timer_id(WF)),
    ]
