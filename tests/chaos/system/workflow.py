"""The order saga of examples/orders with a 2 s hold instead of 24 h, on the system activities."""

from datetime import timedelta
from typing import Any

from slotflow import workflow
from slotflow.workflow import ActivityError, RetryPolicy, Saga

HOLD = timedelta(seconds=2)
STEP_RETRY = RetryPolicy(max_attempts=20, start_to_close=timedelta(seconds=30))


@workflow.defn(name="system.checkout")
class Checkout:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        saga = Saga()
        try:
            auth = await workflow.execute_activity(
                "system.authorize", order, result_type=dict, retry=STEP_RETRY
            )
            saga.add_compensation("system.void", auth)
            held = await workflow.execute_activity(
                "system.reserve", order, result_type=dict, retry=STEP_RETRY
            )
            saga.add_compensation("system.release", held)
            await workflow.sleep(HOLD)
            receipt: dict[str, Any] = await workflow.execute_activity(
                "system.capture", auth, result_type=dict, retry=STEP_RETRY, non_retryable=["CaptureDeclined"]
            )
            return receipt
        except ActivityError:
            await saga.compensate()
            raise
