"""The workflow-history contract's own rules: identities, sequence, compensation links."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from slotflow.contracts import (
    HISTORY_EVENTS,
    REGISTRY,
    ActivityScheduled,
    HistoryEvent,
    TimerFired,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.examples import EXAMPLES
from slotflow.contracts.workflows import TERMINAL_EVENTS


def test_every_history_event_is_registered_under_the_workflow_namespace() -> None:
    names = {model.message_type for model in HISTORY_EVENTS}
    assert len(names) == len(HISTORY_EVENTS) == 23
    assert all(name.startswith("workflow.") for name in names)
    assert all(REGISTRY.model_for(m.message_type, 1) is m for m in HISTORY_EVENTS)
    # The ticker's TimerFired keeps its own name: the history records it under another.
    assert TimerFired.message_type not in names
    assert set(TERMINAL_EVENTS) <= set(HISTORY_EVENTS)


@pytest.mark.parametrize("model", HISTORY_EVENTS, ids=lambda m: m.message_type)
def test_examples_use_the_deterministic_envelope_id(model: type[HistoryEvent]) -> None:
    envelope_id, key, message = EXAMPLES[model]
    assert isinstance(message, HistoryEvent)
    assert (
        envelope_id
        == history_event_id(message.workflow_id, message.sequence)
        == f"order-17#{message.sequence}"
    )
    assert key == message.workflow_id


def test_workflow_started_is_sequence_one() -> None:
    WorkflowStarted(workflow_id="w", sequence=1, workflow_type="t", command_id="c")
    with pytest.raises(ValidationError, match="sequence 1 unless"):
        WorkflowStarted(workflow_id="w", sequence=2, workflow_type="t", command_id="c")
    # A run reusing a closed id starts right after the previous run's end, and only there.
    WorkflowStarted(workflow_id="w", sequence=5, workflow_type="t", command_id="c", reused_after=4)
    with pytest.raises(ValidationError, match="right after the previous run's end"):
        WorkflowStarted(workflow_id="w", sequence=6, workflow_type="t", command_id="c", reused_after=4)
    with pytest.raises(ValidationError, match="not both"):
        WorkflowStarted(
            workflow_id="w", sequence=5, workflow_type="t", command_id="c", reused_after=4, continued_from=4
        )


def test_sequence_starts_at_one() -> None:
    with pytest.raises(ValidationError):
        ActivityScheduled(workflow_id="w", sequence=0, activity="a", run_id="w/0")


def test_activity_run_id_is_workflow_and_sequence() -> None:
    ActivityScheduled(workflow_id="w", sequence=3, activity="a", run_id="w/3")
    with pytest.raises(ValidationError, match="run_id"):
        ActivityScheduled(workflow_id="w", sequence=3, activity="a", run_id="w@2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("compensation", "compensates", "error"),
    [(True, None, "names the step"), (False, 2, "names the step"), (True, 5, "earlier step")],
)
def test_a_compensation_names_an_earlier_step(
    compensation: bool, compensates: int | None, error: str
) -> None:
    with pytest.raises(ValidationError, match=error):
        ActivityScheduled(
            workflow_id="w",
            sequence=5,
            activity="refund",
            run_id="w/5",
            compensation=compensation,
            compensates=compensates,
        )
    ok = ActivityScheduled(
        workflow_id="w", sequence=5, activity="refund", run_id="w/5", compensation=True, compensates=2
    )
    assert ok.compensates == 2


def test_unknown_fields_are_tolerated_for_additive_evolution() -> None:
    data = {
        "workflow_id": "w",
        "sequence": 1,
        "workflow_type": "t",
        "command_id": "c",
        "added_later": datetime.now(UTC).isoformat(),
    }
    assert WorkflowStarted.model_validate(data).workflow_type == "t"


def test_a_continued_run_starts_right_after_its_continue_as_new() -> None:
    WorkflowStarted(workflow_id="w", sequence=8, workflow_type="t", command_id="w#7", continued_from=7)
    with pytest.raises(ValidationError, match="right after"):
        WorkflowStarted(workflow_id="w", sequence=9, workflow_type="t", command_id="w#7", continued_from=7)


def test_a_child_names_its_parent_and_the_parents_sequence() -> None:
    WorkflowStarted(
        workflow_id="c",
        sequence=1,
        workflow_type="t",
        command_id="x",
        parent_workflow_id="p",
        parent_sequence=4,
    )
    with pytest.raises(ValidationError, match="both its parent"):
        WorkflowStarted(
            workflow_id="c", sequence=1, workflow_type="t", command_id="x", parent_workflow_id="p"
        )


def test_only_a_patch_marker_names_a_patch() -> None:
    from slotflow.contracts import MarkerRecorded

    MarkerRecorded(workflow_id="w", sequence=2, kind="patch", patch_id="p")
    MarkerRecorded(workflow_id="w", sequence=2, kind="now", value="2026-01-01T00:00:00+00:00")
    with pytest.raises(ValidationError, match="patch_id"):
        MarkerRecorded(workflow_id="w", sequence=2, kind="patch")
    with pytest.raises(ValidationError, match="patch_id"):
        MarkerRecorded(workflow_id="w", sequence=2, kind="uuid", patch_id="p")


def test_payload_references_are_recognised() -> None:
    from slotflow.contracts.workflows import PAYLOAD_FIELDS, is_payload_ref, payload_ref

    ref = payload_ref("sha256:" + "0" * 64, 70_000)
    assert is_payload_ref(ref)
    assert not is_payload_ref({"$slotflow_payload": "sha256:x", "bytes": 1, "other": 2})
    assert not is_payload_ref({"bytes": 1})
    assert set(PAYLOAD_FIELDS) <= set(HISTORY_EVENTS)
