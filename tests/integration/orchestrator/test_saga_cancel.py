"""A cancel at each step of a saga written as `async with Saga()` (the form examples/orders uses),
on the real broker and database with a real claimer and ticker: during a forward step (held in
flight by the test), during the hold, during the compensation. Every registered compensation
runs exactly once, newest first, and the step in flight when the cancel came is undone too. The
order example itself is cancelled during its hold in test_saga.py."""

from collections.abc import Sequence

from slotflow.contracts import (
    ActivityScheduled,
    CancelRequested,
    CancelWorkflow,
    CompensationRegistered,
    HistoryEvent,
    MarkerRecorded,
    WorkflowCancelled,
)
from slotflow.pg.pool import Pool
from slotflow.testing import assert_eventually
from slotflow.workflow._execution import CANCEL_AWAITS_SAGA_STEP
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica

UNDONE_NEWEST_FIRST = ["inventory.release", "payments.void"]


async def _entered(db: Pool, order_id: str, activity: str) -> None:
    async def probe() -> bool:
        count = await db.fetchval(
            "SELECT count(*) FROM gates_entered WHERE order_id = $1 AND activity = $2", order_id, activity
        )
        return bool(count)

    await assert_eventually(probe, timeout=60, message=f"{activity} of {order_id} in flight")


async def _open(db: Pool, order_id: str, activity: str) -> None:
    await db.execute("INSERT INTO gates_open (order_id, activity) VALUES ($1, $2)", order_id, activity)


def _undo(events: Sequence[HistoryEvent]) -> list[tuple[str, int | None]]:
    return [
        (e.activity, e.compensates) for e in events if isinstance(e, ActivityScheduled) and e.compensation
    ]


async def test_a_cancel_during_a_forward_step_lets_it_finish_and_undoes_it_with_the_rest(
    workflows: Workflows,
) -> None:
    order = {"order_id": "cf-1", "gate": "inventory.reserve"}
    await workflows.start("cf-1", "tests.checkout_block", order, "start-cf-1")
    await _entered(workflows.db, "cf-1", "inventory.reserve")
    await workflows.send(CancelWorkflow(workflow_id="cf-1", reason="customer"), "cancel-cf-1")
    # The cancel is in the history, and the run waits for the reservation in flight.
    await workflows.wait("cf-1", "workflow.marker_recorded")
    await _open(workflows.db, "cf-1", "inventory.reserve")
    events = await workflows.wait("cf-1", "workflow.cancelled")

    ended = events[-1]
    assert isinstance(ended, WorkflowCancelled)
    assert ended.compensated is True
    markers = [e for e in events if isinstance(e, MarkerRecorded)]
    assert [m.patch_id for m in markers] == [CANCEL_AWAITS_SAGA_STEP]
    registered = [(e.activity, e.for_step) for e in events if isinstance(e, CompensationRegistered)]
    assert _undo(events) == [(activity, step) for activity, step in reversed(registered)]
    assert [a for a, _ in _undo(events)] == UNDONE_NEWEST_FIRST
    assert await workflows.effects("cf-1/") == [
        "payments.authorize",
        "inventory.reserve",
        *UNDONE_NEWEST_FIRST,
    ]


async def test_a_cancel_during_the_hold_undoes_both_steps_once(ticker: Replica, workflows: Workflows) -> None:
    await workflows.start(
        "ch-1", "tests.checkout_block", {"order_id": "ch-1", "pause_seconds": 600}, "start-ch-1"
    )
    await workflows.wait("ch-1", "workflow.timer_started")
    await workflows.send(CancelWorkflow(workflow_id="ch-1", reason="customer"), "cancel-ch-1")
    events = await workflows.wait("ch-1", "workflow.cancelled")
    ended = events[-1]
    assert isinstance(ended, WorkflowCancelled)
    assert (ended.reason, ended.compensated) == ("customer", True)
    assert [a for a, _ in _undo(events)] == UNDONE_NEWEST_FIRST
    assert await workflows.effects("ch-1/") == [
        "payments.authorize",
        "inventory.reserve",
        *UNDONE_NEWEST_FIRST,
    ]


async def test_a_cancel_during_the_compensation_waits_for_it_and_runs_nothing_twice(
    ticker: Replica, workflows: Workflows
) -> None:
    order = {"order_id": "cc-1", "pause_seconds": 600, "gate": "inventory.release"}
    await workflows.start("cc-1", "tests.checkout_block", order, "start-cc-1")
    await workflows.wait("cc-1", "workflow.timer_started")
    await workflows.send(CancelWorkflow(workflow_id="cc-1", reason="customer"), "cancel-cc-1")
    await _entered(workflows.db, "cc-1", "inventory.release")  # compensating: release in flight
    await workflows.send(CancelWorkflow(workflow_id="cc-1", reason="operator"), "cancel-cc-1-again")

    async def both_cancels_recorded() -> bool:
        return len([e for e in await workflows.history("cc-1") if isinstance(e, CancelRequested)]) == 2

    await assert_eventually(both_cancels_recorded, timeout=60, message="the second cancel recorded")
    await _open(workflows.db, "cc-1", "inventory.release")
    events = await workflows.wait("cc-1", "workflow.cancelled")
    ended = events[-1]
    assert isinstance(ended, WorkflowCancelled)
    assert (ended.reason, ended.compensated) == ("customer", True)
    assert [a for a, _ in _undo(events)] == UNDONE_NEWEST_FIRST
    assert await workflows.effects("cc-1/") == [
        "payments.authorize",
        "inventory.reserve",
        *UNDONE_NEWEST_FIRST,
    ]
