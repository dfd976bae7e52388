"""The order saga as the orchestrator's tests drive it: examples/orders' shape (authorize, reserve,
capture; on a failed capture undo newest first) with the pause before the capture taken from the
input instead of 24 hours, a cancel compensating too, and a `note` signal. Its activities record
every attempt in an append-only table, which the cancel, signal, fencing and chaos tests count;
examples/orders itself is what test_saga.py and test_http.py run.

Each forward step registers its undo as soon as it succeeded (CompensationRegistered in the
history), so however often the orchestrator crashes, a failed capture runs `inventory.release`
and then `payments.void` (newest first), each once, and the workflow ends `failed` with
`compensated: true`.
"""

from datetime import timedelta
from typing import Any

from slotflow import workflow
from slotflow.contracts.policies import RetryPolicy
from slotflow.workflow import ActivityError, Saga

FAST_RETRY = RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=2), max_attempts=5)


@workflow.defn(name="tests.checkout")
class Checkout:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        saga = Saga()
        auth = await workflow.execute_activity("payments.authorize", order, retry=FAST_RETRY)
        saga.add_compensation("payments.void", {**order, **auth}, retry=FAST_RETRY)
        reservation = await workflow.execute_activity("inventory.reserve", order, retry=FAST_RETRY)
        saga.add_compensation("inventory.release", {**order, **reservation}, retry=FAST_RETRY)
        try:
            pause = float(order.get("pause_seconds", 0))
            if pause:
                await workflow.sleep(timedelta(seconds=pause))
            captured = await workflow.execute_activity(
                "payments.capture", {**order, **auth}, retry=FAST_RETRY
            )
        except (ActivityError, workflow.CancelledError):
            # A failed capture or a cancel request: undo what was done, newest first.
            await saga.compensate()
            raise
        return {"order_id": order["order_id"], **captured, "notes": self.notes}

    @workflow.signal
    async def note(self, payload: dict[str, Any]) -> None:
        self.notes.append(str(payload.get("text", "")))


@workflow.defn(name="tests.checkout_block")
class CheckoutBlock:
    """The same saga in the form examples/orders uses: an `async with Saga()` block, which undoes
    what was done on any exception, a cancel at any step included (a step in flight when the
    cancel comes finishes first, and its undo runs too)."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with Saga() as saga:
            auth = await workflow.execute_activity("payments.authorize", order, retry=FAST_RETRY)
            saga.add_compensation("payments.void", {**order, **auth}, retry=FAST_RETRY)
            reservation = await workflow.execute_activity("inventory.reserve", order, retry=FAST_RETRY)
            saga.add_compensation("inventory.release", {**order, **reservation}, retry=FAST_RETRY)
            pause = float(order.get("pause_seconds", 0))
            if pause:
                await workflow.sleep(timedelta(seconds=pause))
            captured: dict[str, Any] = await workflow.execute_activity(
                "payments.capture", {**order, **auth}, retry=FAST_RETRY
            )
            return {"order_id": order["order_id"], **captured}
