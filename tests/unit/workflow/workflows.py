"""Workflow classes the runtime tests drive (module level, so their annotations resolve)."""

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from slotflow import workflow
from slotflow.workflow import ActivityError, RetryPolicy, Saga


class Order(BaseModel):
    order_id: int
    amount: str = "10.00"


class Receipt(BaseModel):
    order_id: int
    capture: str


@workflow.defn(name="orders.checkout")
class Checkout:
    """The seed's order saga: authorize, reserve, sleep a day, capture; undo in reverse on failure."""

    @workflow.run
    async def run(self, order: Order) -> Receipt:
        saga = Saga()
        try:
            auth = await workflow.execute_activity(
                "payments.authorize",
                order,
                retry=RetryPolicy(max_attempts=5),
                start_to_close=timedelta(seconds=30),
            )
            saga.add_compensation("payments.void", auth)
            hold = await workflow.execute_activity("inventory.reserve", order)
            saga.add_compensation("inventory.release", hold)
            await workflow.sleep(timedelta(hours=24))
            capture = await workflow.execute_activity(
                "payments.capture", auth, non_retryable=["CardDeclined"]
            )
            return Receipt(order_id=order.order_id, capture=capture["id"])
        except (ActivityError, asyncio.CancelledError):
            await saga.compensate()
            raise


@workflow.defn(name="signals.approval")
class Approval:
    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.run
    async def run(self) -> dict[str, object]:
        await workflow.wait_condition(lambda: self.approved_by is not None)
        note = await workflow.wait_signal("note")
        return {"by": self.approved_by, "note": note}

    @workflow.signal
    def approve(self, payload: dict[str, str]) -> None:
        self.approved_by = payload["who"]


@workflow.defn(name="timers.deadline")
class Deadline:
    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.wait_condition(lambda: self.done, timeout=timedelta(hours=1))
        except TimeoutError:
            return "timed out"
        return "done"

    @workflow.signal
    async def finish(self) -> None:
        self.done = True


@workflow.defn(name="values.recorded")
class Recorded:
    @workflow.run
    async def run(self) -> dict[str, object]:
        at = workflow.now()
        value = workflow.random()
        token = workflow.uuid4()
        info = workflow.info()
        return {"at": at.isoformat(), "random": value, "uuid": str(token), "length": info.history_length}


@workflow.defn(name="parallel.fanout")
class Fanout:
    @workflow.run
    async def run(self, items: dict[str, list[int]]) -> list[object]:
        calls = [workflow.execute_activity("items.price", {"item": i}) for i in items["items"]]
        return await workflow.gather(*calls)
