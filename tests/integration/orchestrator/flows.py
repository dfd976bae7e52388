"""Small workflows for the orchestrator's tests (the saga is saga.py)."""

import asyncio
import time
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from slotflow import workflow


@workflow.defn(name="tests.approval")
class Approval:
    """Waits for an `approve` signal, then authorizes with the signal's amount."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        approval = await workflow.wait_signal("approve")
        auth = await workflow.execute_activity("payments.authorize", {**order, **approval})
        return {"approved_by": approval.get("by"), **auth}


@workflow.defn(name="tests.parent")
class Parent:
    """Runs the order saga as a child and returns what the child returned."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        child = await workflow.execute_child_workflow(
            "tests.checkout", order, id=f"{workflow.info().workflow_id}-child"
        )
        return {"child": child}


@workflow.defn(name="tests.sleeper")
class Sleeper:
    """Sleeps, then authorizes: a durable timer through the ticker."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        await workflow.sleep(timedelta(seconds=float(order.get("seconds", 1))))
        authorized: dict[str, Any] = await workflow.execute_activity("payments.authorize", order)
        return authorized


@workflow.defn(name="tests.large_result")
class LargeResult:
    """Gets a large activity result and reports its size: the code sees the value itself."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        auth = await workflow.execute_activity("payments.authorize", order)
        signal = await workflow.wait_signal("go")
        return {"blob_size": len(auth["blob"]), "signal_size": len(signal["note"])}


@workflow.defn(name="tests.deadline")
class Deadline:
    """An activity that cannot finish within its schedule-to-close timeout."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        try:
            await workflow.execute_activity("shipping.slow", order, schedule_to_close=timedelta(seconds=1))
        except workflow.ActivityError as err:
            return {"error_type": err.error_type, "timed_out": isinstance(err, workflow.ActivityTimeoutError)}
        return {"error_type": None}


class Meltdown(BaseException):
    """Not an Exception: what `except Exception` around workflow code misses."""


@workflow.defn(name="tests.exits")
class Exits:
    """Careless workflow code: `sys.exit` in the body (it ended the orchestrator's process)."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        raise SystemExit(f"workflow code gave up on {order['order_id']}")


@workflow.defn(name="tests.melts")
class Melts:
    """Workflow code raising a BaseException of its own."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        raise Meltdown("core temperature exceeded")


@workflow.defn(name="tests.echo")
class Echo:
    """Returns its input: a workflow that needs nothing but its orchestrator."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return order


@workflow.defn(name="tests.parked_booking")
class ParkedBooking:
    """Books a shipment whose run, should the claimers give up, waits in the DLQ for a redrive."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        quick = workflow.RetryPolicy(
            base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), max_attempts=2
        )
        booking: dict[str, Any] = await workflow.execute_activity(
            "shipping.book", order, retry=quick, on_dead_letter="park"
        )
        return booking


@workflow.defn(name="tests.batches")
class Batches:
    """Authorizes one batch a run, waits for a `next` signal, and continues as new with the
    cursor moved on; after the last batch it returns every run it saw."""

    @workflow.run
    async def run(self, state: dict[str, Any]) -> dict[str, Any]:
        cursor, last = int(state.get("cursor", 0)), int(state.get("last", 2))
        info = workflow.info()
        await workflow.execute_activity("payments.authorize", {"order_id": f"{info.workflow_id}-{cursor}"})
        runs = [*state.get("runs", []), {"run_id": info.run_id, "continued_from": info.continued_from}]
        if cursor < last:
            await workflow.wait_signal("next")
            workflow.continue_as_new({"cursor": cursor + 1, "last": last, "runs": runs})
        return {"cursor": cursor, "runs": runs}


@workflow.defn(name="tests.default_child")
class DefaultChild:
    """Starts `tests.waits_for_go` as a child with the SDK's default id (`{id}/child/{sequence}`)."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return {"child": await workflow.execute_child_workflow("tests.waits_for_go", order)}


@workflow.defn(name="tests.waits_for_go")
class WaitsForGo:
    """Waits for a `go` signal and returns its payload with its input."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return {"order": order, "go": await workflow.wait_signal("go")}


class Address(BaseModel):
    street: str
    zip: int


@workflow.defn(name="tests.addressed")
class Addressed:
    """Waits for an `address_changed` signal whose handler takes an `Address`, then authorizes.

    A payload that is not an Address is the orchestrator's to refuse at intake; an address with
    zip 0 makes the handler raise, which fails the run after the body's compensation ran."""

    def __init__(self) -> None:
        self.address: Address | None = None

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with workflow.Saga() as saga:
            auth = await workflow.execute_activity("payments.authorize", order)
            saga.add_compensation("payments.void", {**order, **auth})
            await workflow.wait_condition(lambda: self.address is not None)
            return {"order_id": order["order_id"], "zip": self.address.zip if self.address else None}

    @workflow.signal
    def address_changed(self, address: Address) -> None:
        if address.zip == 0:
            raise ValueError(f"no address has zip 0 ({address.street})")
        self.address = address


@workflow.defn(name="tests.clock_reader")
class ClockReader:
    """Branches on the host clock: the runtime refuses the read (in production, not only in
    tests), so the workflow is stuck with the call named, never run on a value a replay would not
    see again."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("payments.authorize", order)
        late = time.time() > 0  # workflow-check: ignore - the trap under test
        return {"order_id": order["order_id"], "late": late}


@workflow.defn(name="tests.awaits_approval")
class AwaitsApproval:
    """Authorizes, then waits up to a day for an `approve` signal."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("payments.authorize", order)
        try:
            approval = await workflow.wait_signal("approve", timeout=timedelta(days=1))
        except TimeoutError:
            return {"approved_by": None}
        return {"approved_by": approval.get("by")}


#: The long step the activity-cancellation tests register per test (it heartbeats until cancelled).
LONG_STEP = "tests.long_step"


@workflow.defn(name="tests.long_step")
class LongStep:
    """Runs one long step and returns its result: a cancel of the workflow abandons it."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> Any:
        return await workflow.execute_activity(
            LONG_STEP, order, retry=workflow.RetryPolicy(max_attempts=3, base=timedelta(milliseconds=100))
        )


@workflow.defn(name="tests.abandons_step")
class AbandonsStep:
    """Starts the long step, cancels it when the `stop` signal comes, and completes."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> str:
        step = workflow.create_task(workflow.execute_activity(LONG_STEP, order))
        await workflow.wait_signal("stop")
        step.cancel()
        try:
            await step
        except asyncio.CancelledError:
            return "abandoned"
        return "finished first"


@workflow.defn(name="tests.noting")
class Noting:
    """Keeps each `note` signal's text until one says done; answers `notes` with them."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        while True:
            note = await workflow.wait_signal("note")
            if note.get("done"):
                return {"notes": self.notes}
            self.notes.append(str(note["text"]))

    @workflow.query(name="notes")
    def notes_so_far(self) -> list[str]:
        return list(self.notes)
