"""slotflow.contracts.routing: which topic and key each command goes to, and what its envelope carries."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow.contracts import (
    REGISTRY,
    CancelTimer,
    CancelWorkflow,
    CommandAccepted,
    CreateSchedule,
    CronSpec,
    DeadLetterFilter,
    DiscardDeadLetters,
    JobDue,
    PauseSchedule,
    RedriveDeadLetters,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    TriggerNow,
)
from slotflow.contracts.catalogue import COMMAND_TYPES
from slotflow.contracts.routing import (
    InvalidCommandId,
    NotACommand,
    build_command,
    command_route,
)
from slotflow.contracts.topics import DLQ_COMMANDS, SCHEDULE_COMMANDS, TIMER_COMMANDS, WORKFLOW_COMMANDS

DEFINITION = ScheduleDefinition(spec=CronSpec(expression="0 2 * * *"), handler="payouts.pay")


def test_schedule_commands_go_to_the_ticker_keyed_by_schedule() -> None:
    route = command_route(CreateSchedule(schedule_id="nightly", definition=DEFINITION))
    assert (route.topic, route.key) == (SCHEDULE_COMMANDS, "nightly")
    assert command_route(PauseSchedule(schedule_id="a.b")).key == "a.b"
    assert command_route(TriggerNow(schedule_id="t")).topic == SCHEDULE_COMMANDS


def test_timer_commands_go_to_the_internal_timer_topic_keyed_by_timer() -> None:
    route = command_route(CancelTimer(timer_id="retry:x@2026-01-01T00:00:00Z#2"))
    assert (route.topic, route.key) == (TIMER_COMMANDS, "retry:x@2026-01-01T00:00:00Z#2")


def test_workflow_commands_are_keyed_by_workflow() -> None:
    for message in (
        StartWorkflow(workflow_id="order-1", workflow_type="order"),
        SignalWorkflow(workflow_id="order-1", signal="paid"),
        CancelWorkflow(workflow_id="order-1"),
    ):
        route = command_route(message)
        assert (route.topic, route.key) == (WORKFLOW_COMMANDS, "order-1")


def test_dlq_command_keyed_by_its_single_id_or_by_the_command() -> None:
    one = RedriveDeadLetters(selection=DeadLetterFilter(ids=("t:0:5",)))
    assert command_route(one).key == "t:0:5"
    spec, envelope = build_command(
        DiscardDeadLetters(selection=DeadLetterFilter(reason="undecodable"), reason="junk"),
        command_id="c-1",
        source="test",
    )
    assert spec == DLQ_COMMANDS
    assert envelope.key == "c-1"


def test_events_are_not_commands() -> None:
    with pytest.raises(NotACommand):
        command_route(CommandAccepted(command_id="c", command_type="schedule.create", subject="s"))
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(NotACommand):
        build_command(JobDue(run_id="r", job_id="j", slot=slot, handler="h"), source="test")


def test_envelope_round_trips_through_the_registry() -> None:
    message = CreateSchedule(schedule_id="nightly", definition=DEFINITION, paused=True)
    _, envelope = build_command(message, command_id="idem-42", source="api")
    assert envelope.id == "idem-42"
    assert envelope.type == "schedule.create"
    assert REGISTRY.parse(envelope) == message


def test_generated_ids_are_distinct() -> None:
    message = TriggerNow(schedule_id="s")
    ids = {build_command(message, source="t")[1].id for _ in range(50)}
    assert len(ids) == 50


@pytest.mark.parametrize("bad", ["", "x" * 1001, "a\nb", "tab\there", "del\x7f", "c1\x85"])
def test_unusable_command_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidCommandId):
        build_command(TriggerNow(schedule_id="s"), command_id=bad, source="t")


@given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=200))
def test_any_printable_id_is_kept_verbatim(command_id: str) -> None:
    _, envelope = build_command(TriggerNow(schedule_id="s"), command_id=command_id, source="t")
    assert envelope.id == command_id


def test_every_command_type_is_registered() -> None:
    for model in COMMAND_TYPES:
        assert REGISTRY.model_for(model.message_type, model.message_version) is model
