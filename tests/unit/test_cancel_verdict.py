"""A workflow's cancel of its activity (slotflow.issuers.cancel_verdict), pure: it counts only when
the orchestrator recorded it and the claimer's run is that workflow's activity at that sequence;
and its identity (slotflow.contracts.identity): run id, envelope id and key follow from it."""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import CancelActivity, Envelope, wrap
from slotflow.contracts.dlq import KNOWN_REASONS
from slotflow.contracts.identity import identity_violation
from slotflow.errors import PoisonMessage, UnprovenCancel
from slotflow.issuers import ACCEPTED, UNPROVEN_CANCEL, CancelTarget, cancel_verdict

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)


def cancel(workflow_id: str = "order-17", sequence: int = 8, *, handler: str = "ship.book") -> CancelActivity:
    return CancelActivity(
        workflow_id=workflow_id,
        sequence=sequence,
        run_id=f"{workflow_id}/{sequence}",
        handler=handler,
        reason="workflow order-17 was cancelled",
    )


def activity_run(
    run_id: str = "order-17/8",
    *,
    workflow_id: str | None = "order-17",
    sequence: int | None = 8,
    kind: str = "activity",
    handler: str = "ship.book",
    state: str = "running",
) -> CancelTarget:
    return CancelTarget(run_id, kind, workflow_id, sequence, handler, state)


def test_a_cancel_the_orchestrator_recorded_for_its_activity_is_accepted() -> None:
    assert cancel_verdict(cancel(), issued=True, record=activity_run()) == ACCEPTED


def test_a_cancel_of_a_run_the_claimer_holds_no_row_of_yet_is_accepted() -> None:
    """The JobDue may still be on its way: the cancel is recorded and the run never starts."""
    assert cancel_verdict(cancel(), issued=True, record=None).accepted


def test_a_cancel_the_orchestrator_never_recorded_is_refused() -> None:
    for record in (activity_run(), None):
        verdict = cancel_verdict(cancel(), issued=False, record=record)
        assert (verdict.reason, verdict.rule) == (UNPROVEN_CANCEL, "not_issued")
        assert "recorded no cancel of activity 8 of workflow 'order-17'" in verdict.detail


def test_a_cancel_naming_a_schedules_run_is_refused() -> None:
    """A row under that id that is no activity (it cannot happen with genuine ids, but the check
    does not rest on that)."""
    target = activity_run(workflow_id=None, sequence=None, kind="scheduled")
    verdict = cancel_verdict(cancel(), issued=True, record=target)
    assert (verdict.reason, verdict.rule) == (UNPROVEN_CANCEL, "not_activity")
    assert "is a scheduled run" in verdict.detail


def test_a_cancel_naming_another_workflows_run_is_refused() -> None:
    target = activity_run(workflow_id="order-99", sequence=8)
    verdict = cancel_verdict(cancel(), issued=True, record=target)
    assert verdict.rule == "not_activity"
    assert "of workflow 'order-99'" in verdict.detail
    other_sequence = cancel_verdict(cancel(), issued=True, record=activity_run(sequence=9))
    assert other_sequence.rule == "not_activity"


def test_a_cancel_naming_another_handler_is_refused() -> None:
    verdict = cancel_verdict(cancel(handler="ship.other"), issued=True, record=activity_run())
    assert (verdict.reason, verdict.rule) == (UNPROVEN_CANCEL, "handler")


def test_a_refusal_parks_as_unproven_cancel() -> None:
    error = cancel_verdict(cancel(), issued=False, record=None).error()
    assert isinstance(error, UnprovenCancel)
    assert isinstance(error, PoisonMessage)
    assert error.reason == "unproven_cancel" == UNPROVEN_CANCEL
    assert UNPROVEN_CANCEL in KNOWN_REASONS


def _envelope(message: CancelActivity, *, id: str | None = None, key: str | None = None) -> Envelope:
    return wrap(
        message,
        id=id if id is not None else f"{message.run_id}/cancel",
        key=key if key is not None else message.workflow_id,
        source="orchestrator",
        occurred_at=NOW,
    )


def test_a_cancels_identity_follows_from_its_workflow_and_sequence() -> None:
    message = cancel()
    assert identity_violation(_envelope(message), message) is None


@pytest.mark.parametrize(
    ("run_id", "id", "key", "said"),
    [
        (
            "victim@2026-12-08T09:00:00Z",
            "victim@2026-12-08T09:00:00Z/cancel",
            "order-17",
            "is not 'order-17/8'",
        ),
        ("order-99/8", "order-99/8/cancel", "order-17", "is not 'order-17/8'"),
        ("order-17/8", "order-17/9/cancel", "order-17", "id 'order-17/9/cancel' is not"),
        ("order-17/8", "order-17/8/cancel", "order-99", "keyed 'order-99'"),
    ],
)
def test_a_cancel_whose_ids_do_not_follow_is_invalid(run_id: str, id: str, key: str, said: str) -> None:
    message = cancel().model_copy(update={"run_id": run_id})
    violation = identity_violation(_envelope(message, id=id, key=key), message)
    assert violation is not None
    assert said in violation
