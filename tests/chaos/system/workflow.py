"""The order saga of examples/orders with a 2 s hold instead of 24 h, on the system activities.

Like the example, its steps run in an `async with Saga()` block: a declined capture, a cancel at
any step and a failing signal handler all undo what was done, newest first. Its `note` signal
takes a `Note`: the workload sends some that do not decode, which the orchestrator must refuse
at intake (they never reach the run)."""

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from slotflow import workflow
from slotflow.workflow import RetryPolicy, Saga

HOLD = timedelta(seconds=2)
STEP_RETRY = RetryPolicy(max_attempts=20, start_to_close=timedelta(seconds=30))


class Note(BaseModel):
    text: str
    urgent: bool = False


@workflow.defn(name="system.checkout")
class Checkout:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with Saga() as saga:
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
            return {**receipt, "notes": self.notes}

    @workflow.signal
    def note(self, note: Note) -> None:
        self.notes.append(note.text)
