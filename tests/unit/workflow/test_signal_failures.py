"""A signal handler that raises fails the run the way the body would: the body is cancelled
first, so its `async with Saga()` (or except/finally) compensates before the run closes, and the
run fails with the handler's error. Histories recorded before that rule (the run failed at once,
its compensations unrun) still replay to the same result."""

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from slotflow import workflow
from slotflow.contracts.workflows import (
    ActivityScheduled,
    CompensationRegistered,
    MarkerRecorded,
    SignalReceived,
    TimerStarted,
    WorkflowFailed,
)
from slotflow.errors import PermanentError
from slotflow.runs import RunContext
from slotflow.workflow import ActivityError, Replayer, Saga
from slotflow.workflow._execution import SIGNAL_FAILURE_COMPENSATES
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError
from tests.unit.workflow.helpers import History, types


class Address(BaseModel):
    street: str
    zip: int


@workflow.defn(name="signals.shipping")
class Shipping:
    """Authorizes, waits for an address, ships; every step done is undone on failure or cancel."""

    def __init__(self) -> None:
        self.address: Address | None = None

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with Saga() as saga:
            auth = await workflow.execute_activity("payments.authorize", order)
            saga.add_compensation("payments.void", auth)
            await workflow.wait_condition(lambda: self.address is not None)
            shipped: dict[str, Any] = await workflow.execute_activity("shipping.book", order)
            return shipped

    @workflow.signal
    def address_changed(self, address: Address) -> None:
        if address.zip == 0:
            raise ValueError("zip 0 is nowhere")
        self.address = address

    @workflow.signal
    async def recheck(self, payload: dict[str, Any]) -> None:
        await workflow.execute_activity("address.verify", payload)
        raise LookupError(f"address {payload.get('street')!r} does not exist")


class NoCarrier(PermanentError):
    pass


def _activities(calls: list[str], *, book_fails: bool = False) -> dict[str, Any]:
    async def ok(ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.handler)
        return {"id": ctx.run_id}

    async def book(ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.handler)
        if book_fails:
            raise NoCarrier("no carrier serves this address")
        return {"id": ctx.run_id}

    return {
        "payments.authorize": ok,
        "payments.void": ok,
        "address.verify": ok,
        "shipping.book": book,
    }


@pytest.mark.parametrize(
    ("signal", "payload", "error_type"),
    [
        ("address_changed", {"street": "Main 1", "zip": "not a number"}, "ValidationError"),
        ("address_changed", {"street": "Main 1", "zip": 0}, "ValueError"),
        ("recheck", {"street": "Nowhere 9"}, "LookupError"),
    ],
    ids=["payload-does-not-decode", "sync-handler-raises", "async-handler-raises"],
)
async def test_a_failing_signal_handler_lets_the_saga_compensate_before_the_run_fails(
    signal: str, payload: dict[str, Any], error_type: str
) -> None:
    calls: list[str] = []
    async with WorkflowEnvironment([Shipping], activities=_activities(calls), replay_every_step=True) as env:
        handle = await env.start_workflow(Shipping, {"order_id": 1}, id="ship-1")
        await env.signal("ship-1", signal, payload)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        history = env.history("ship-1")

    assert failed.value.error_type == error_type
    assert failed.value.compensated is True
    assert calls[0] == "payments.authorize"
    assert calls[-1] == "payments.void"
    assert calls.count("payments.void") == 1
    assert "shipping.book" not in calls
    # The marker that says this run follows the rule, right where the handler failed.
    (marker,) = [e for e in history if isinstance(e, MarkerRecorded)]
    assert marker.patch_id == SIGNAL_FAILURE_COMPENSATES
    received = next(e for e in history if isinstance(e, SignalReceived))
    assert marker.sequence > received.sequence
    # Recorded under the rule, the history replays to the same end.
    replayed = Replayer([Shipping]).replay(history)
    assert replayed.status == "failed"


async def test_a_handler_failing_while_the_saga_compensates_lets_it_finish_once() -> None:
    """The cancel a handler's failure causes waits, like a cancel request, until the compensation
    under way is done: every undo runs once, and the run fails with the handler's error."""
    calls: list[str] = []
    activities = _activities(calls, book_fails=True)
    compensating, release = asyncio.Event(), asyncio.Event()

    async def slow_void(ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.handler)
        compensating.set()
        await release.wait()
        return {}

    activities["payments.void"] = slow_void
    async with WorkflowEnvironment([Shipping], activities=activities, replay_every_step=True) as env:
        handle = await env.start_workflow(Shipping, {"order_id": 2}, id="ship-2")
        # A good address: the booking runs and fails for good, so the saga compensates.
        booking = asyncio.ensure_future(
            env.signal("ship-2", "address_changed", {"street": "Main 1", "zip": 10115})
        )
        await asyncio.wait_for(compensating.wait(), timeout=5)
        failing = asyncio.ensure_future(
            env.signal("ship-2", "address_changed", {"street": "Main 1", "zip": 0})
        )
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(booking, failing), timeout=5)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert failed.value.error_type == "ValueError"
    assert failed.value.compensated is True
    assert calls == ["payments.authorize", "shipping.book", "payments.void"]


@workflow.defn(name="signals.authorizing")
class Authorizing:
    """A saga block whose authorization a test holds in flight while a bad signal arrives."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> str:
        async with Saga() as saga:
            auth = await workflow.execute_activity("payments.authorize", order)
            saga.add_compensation("payments.void", auth)
            await workflow.wait_condition(lambda: False)
            return "never"

    @workflow.signal
    def address_changed(self, address: Address) -> None:
        pass


async def test_a_handler_failing_while_a_saga_step_is_in_flight_waits_for_it_and_undoes_it() -> None:
    """Like a cancel request: the authorization in flight finishes, its void is registered and run
    (cancelled at once, the authorization would have stayed held)."""
    calls: list[str] = []
    entered, release = asyncio.Event(), asyncio.Event()

    async def authorize(ctx: RunContext) -> dict[str, Any]:
        calls.append(ctx.handler)
        entered.set()
        await release.wait()
        return {"id": ctx.run_id}

    async def void(ctx: RunContext) -> None:
        calls.append(ctx.handler)

    activities = {"payments.authorize": authorize, "payments.void": void}
    async with WorkflowEnvironment([Authorizing], activities=activities, replay_every_step=True) as env:
        starting = asyncio.ensure_future(env.start_workflow(Authorizing, {"order_id": 9}, id="auth-9"))
        await asyncio.wait_for(entered.wait(), timeout=5)
        signalling = asyncio.ensure_future(env.signal("auth-9", "address_changed", {"zip": "nope"}))
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(starting, signalling), timeout=5)
        with pytest.raises(WorkflowFailureError) as failed:
            await env.handle("auth-9").result()
    assert (failed.value.error_type, failed.value.compensated) == ("ValidationError", True)
    assert calls == ["payments.authorize", "payments.void"]


def _old_rule_history() -> list[Any]:
    """What a run recorded before the rule: the handler's ValidationError failed the run in the
    decision that delivered the signal, with the compensation registered and never run."""
    history = History(WorkflowRuntime([Shipping]), "signals.shipping", {"order_id": 3})
    history.replay()  # authorize
    history.complete(2, {"id": "wf-1/2"})
    history.replay()  # compensation registered; the code waits for an address
    history.signal("address_changed", {"street": "Main 1", "zip": "not a number"})
    history.add(
        WorkflowFailed,
        error_type="ValidationError",
        message="1 validation error for Address",
        compensated=False,
    )
    return history.events


def test_a_history_recorded_under_the_old_rule_replays_to_the_same_failure() -> None:
    history = _old_rule_history()
    assert types(history) == [
        "started",
        "activity_scheduled",
        "activity_completed",
        "compensation_registered",
        "signal_received",
        "failed",
    ]

    replayed = Replayer([Shipping]).replay(history)

    assert replayed.status == "failed"
    assert replayed.next_events == []
    # And the runtime deciding on it (the orchestrator after a restart) adds nothing.
    assert WorkflowRuntime([Shipping]).replay(history, now=History(WorkflowRuntime([]), "x").now).closed


def test_the_new_rule_on_the_runtime_event_by_event() -> None:
    """What the orchestrator appends: the marker, the compensation, and once it is done, the run's
    failure with the handler's error."""
    history = History(WorkflowRuntime([Shipping]), "signals.shipping", {"order_id": 4})
    history.replay()
    history.complete(2, {"id": "wf-1/2"})
    history.replay()
    history.signal("address_changed", {"street": "Main 1", "zip": 0})
    marker, undo = history.replay().events
    assert isinstance(marker, MarkerRecorded)
    assert marker.patch_id == SIGNAL_FAILURE_COMPENSATES
    assert isinstance(undo, ActivityScheduled)
    assert (undo.activity, undo.compensates) == ("payments.void", 2)
    history.complete(undo.sequence)
    (failed,) = history.replay().events
    assert isinstance(failed, WorkflowFailed)
    assert (failed.error_type, failed.message, failed.compensated) == ("ValueError", "zip 0 is nowhere", True)
    assert [type(e) for e in history.events].count(CompensationRegistered) == 1
    assert not [e for e in history.events if isinstance(e, TimerStarted)]


@workflow.defn(name="signals.no_saga")
class NoSaga:
    """No compensation to run: the body only sleeps, and the run fails with the handler's error."""

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.wait_condition(lambda: False)
        except ActivityError:
            return "never"
        return "never"

    @workflow.signal
    def poke(self, payload: dict[str, int]) -> None:
        raise KeyError(payload["missing"])


def test_a_body_without_a_saga_fails_with_the_handlers_error() -> None:
    history = History(WorkflowRuntime([NoSaga]), "signals.no_saga")
    history.replay()
    history.signal("poke", {"n": 1})
    marker, failed = history.replay().events
    assert isinstance(marker, MarkerRecorded)
    assert isinstance(failed, WorkflowFailed)
    assert (failed.error_type, failed.compensated) == ("KeyError", False)
