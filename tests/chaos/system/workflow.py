"""The order saga of examples/orders with a 2 s hold instead of 24 h, on the system activities.

Like the example, its steps run in an `async with Saga()` block: a declined capture, a cancel at
any step and a failing signal handler all undo what was done, newest first. Its `note` signal
takes a `Note`: the workload sends some that do not decode, which the orchestrator must refuse
at intake (they never reach the run).

`system.checkout.parking` is the same saga with its reservation parked on a final failure
(`on_dead_letter="park"`): the sandbox warehouse refuses a parking order's reservation until an
operator repairs it (handlers.py), so the step waits in the DLQ, with a letter, until an operator
retries it (RetryActivity, or a redrive of its letter); a cancel while it waits compensates."""

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from slotflow import workflow
from slotflow.contracts.policies import DeadLetterPolicy
from slotflow.workflow import RetryPolicy, Saga

HOLD = timedelta(seconds=2)
STEP_RETRY = RetryPolicy(max_attempts=20, start_to_close=timedelta(seconds=30))


class Note(BaseModel):
    text: str
    urgent: bool = False


async def checkout(
    order: dict[str, Any], notes: list[str], *, reserve_on_dead_letter: DeadLetterPolicy
) -> dict[str, Any]:
    """The saga both workflow types run; only what a final failure of the reservation does differs."""
    async with Saga() as saga:
        auth = await workflow.execute_activity("system.authorize", order, result_type=dict, retry=STEP_RETRY)
        saga.add_compensation("system.void", auth)
        held = await workflow.execute_activity(
            "system.reserve",
            order,
            result_type=dict,
            retry=STEP_RETRY,
            on_dead_letter=reserve_on_dead_letter,
        )
        saga.add_compensation("system.release", held)
        await workflow.sleep(HOLD)
        receipt: dict[str, Any] = await workflow.execute_activity(
            "system.capture", auth, result_type=dict, retry=STEP_RETRY, non_retryable=["CaptureDeclined"]
        )
        return {**receipt, "notes": notes}


@workflow.defn(name="system.checkout")
class Checkout:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return await checkout(order, self.notes, reserve_on_dead_letter="fail")

    @workflow.signal
    def note(self, note: Note) -> None:
        self.notes.append(note.text)


@workflow.defn(name="system.checkout.parking")
class ParkingCheckout:
    """A parking order's saga: its refused reservation waits, parked, for an operator's retry."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return await checkout(order, self.notes, reserve_on_dead_letter="park")

    @workflow.signal
    def note(self, note: Note) -> None:
        self.notes.append(note.text)
