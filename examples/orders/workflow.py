"""The order saga: authorize, reserve, wait the hold (24 hours), capture; undone in reverse if it stops early.

Workflow code only decides; every effect is an activity (orders.activities). It passes
`slotflow workflow check orders` (no host clock, randomness or I/O in here).
"""

from datetime import timedelta

from orders.models import Authorization, Order, Receipt, Reservation
from slotflow import workflow
from slotflow.workflow import RetryPolicy, Saga

STEP_RETRY = RetryPolicy(max_attempts=5, start_to_close=timedelta(seconds=30))


@workflow.defn(name="orders.checkout")
class Checkout:
    def __init__(self) -> None:
        self.stage = "authorizing"

    @workflow.run
    async def run(self, order: Order) -> Receipt:
        # Whatever ends the block early undoes what was done, newest first (the stock goes back
        # before the authorization is voided): a declined capture (ActivityError), a cancel at
        # any step (CancelledError; a step in flight then finishes first, so its undo runs too),
        # a signal handler that fails. A cancel during the compensation waits for it.
        async with Saga() as saga:
            auth = await workflow.execute_activity(
                "payments.authorize", order, result_type=Authorization, retry=STEP_RETRY
            )
            saga.add_compensation("payments.void", auth)
            self.stage = "reserving"
            reservation = await workflow.execute_activity(
                "inventory.reserve", order, result_type=Reservation, retry=STEP_RETRY
            )
            saga.add_compensation("inventory.release", reservation)
            self.stage = "holding"
            await workflow.sleep(order.hold)
            self.stage = "capturing"
            return await workflow.execute_activity(
                "payments.capture",
                auth,
                result_type=Receipt,
                retry=STEP_RETRY,
                non_retryable=["CaptureDeclined"],
            )

    @workflow.query(name="stage")
    def current_stage(self) -> str:
        """Where the order is: `authorizing`, `reserving`, `holding` or `capturing` (a query reads
        the state its last decision left; it records nothing)."""
        return self.stage
