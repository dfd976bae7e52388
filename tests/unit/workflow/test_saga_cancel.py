"""A cancel at any step of a saga written with `async with Saga()`: during a forward step (it waits
for the step, whose undo then runs too), during the hold, during the compensation itself. Every
compensation registered runs exactly once, newest first. And the test environment lets workflow
code cancel an activity in flight (a due timer fires while activities run)."""

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts.workflows import (
    ActivityScheduled,
    CancelRequested,
    MarkerRecorded,
    TimerStarted,
    WorkflowCancelled,
)
from slotflow.runs import RunContext
from slotflow.workflow import Replayer, Saga
from slotflow.workflow._execution import CANCEL_AWAITS_SAGA_STEP
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError
from tests.unit.workflow.helpers import History, types


@workflow.defn(name="sagas.block")
class BlockSaga:
    """authorize, reserve, hold an hour, capture; `async with Saga()` undoes on any exception."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with Saga() as saga:
            auth = await workflow.execute_activity("payments.authorize", order)
            saga.add_compensation("payments.void", auth)
            hold = await workflow.execute_activity("inventory.reserve", order)
            saga.add_compensation("inventory.release", hold)
            await workflow.sleep(timedelta(hours=1))
            captured: dict[str, Any] = await workflow.execute_activity("payments.capture", auth)
            return captured


class Gate:
    """Activities that record each call and, when asked, wait at one step until the test lets go."""

    def __init__(self, blocks: str | None = None) -> None:
        self.calls: list[str] = []
        self.blocks = blocks
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def activities(self) -> dict[str, Any]:
        async def step(ctx: RunContext) -> dict[str, Any]:
            self.calls.append(ctx.handler)
            if ctx.handler == self.blocks:
                self.entered.set()
                await self.release.wait()
            return {"id": ctx.run_id}

        names = (
            "payments.authorize",
            "inventory.reserve",
            "payments.capture",
            "inventory.release",
            "payments.void",
        )
        return dict.fromkeys(names, step)

    def undone(self) -> Counter[str]:
        return Counter(c for c in self.calls if c in ("inventory.release", "payments.void"))


async def _cancel_while(env: WorkflowEnvironment, gate: Gate, workflow_id: str, start: Any) -> None:
    """Cancel once an activity is inside the blocking step, then let that step finish."""
    running = asyncio.ensure_future(start)
    await asyncio.wait_for(gate.entered.wait(), timeout=5)
    cancelling = asyncio.ensure_future(env.cancel(workflow_id, "customer cancelled"))
    await asyncio.sleep(0)  # the cancel is appended and decided before the step finishes
    gate.release.set()
    await asyncio.wait_for(asyncio.gather(running, cancelling), timeout=5)


async def test_a_cancel_during_a_forward_step_waits_for_it_and_undoes_it_too() -> None:
    """The reservation is in flight when the cancel arrives: its effect may be happening. The
    block lets it finish, registers its undo, then raises the cancel: both steps are undone once,
    newest first (without the wait, the reservation's result was dropped and the stock stayed held)."""
    gate = Gate(blocks="inventory.reserve")
    async with WorkflowEnvironment([BlockSaga], activities=gate.activities(), replay_every_step=True) as env:
        await _cancel_while(env, gate, "o-1", env.start_workflow(BlockSaga, {"order_id": 1}, id="o-1"))
        with pytest.raises(WorkflowFailureError) as ended:
            await env.handle("o-1").result()
        history = env.history("o-1")
    assert ended.value.cancelled
    assert ended.value.compensated
    assert gate.calls == ["payments.authorize", "inventory.reserve", "inventory.release", "payments.void"]
    undo = [
        (e.activity, e.compensates) for e in history if isinstance(e, ActivityScheduled) and e.compensation
    ]
    assert undo == [("inventory.release", 5), ("payments.void", 2)]
    # The patch marker that says this run waited, right after the cancel request.
    cancel_at = next(i for i, e in enumerate(history) if isinstance(e, CancelRequested))
    marker = history[cancel_at + 1]
    assert isinstance(marker, MarkerRecorded)
    assert marker.patch_id == CANCEL_AWAITS_SAGA_STEP
    assert not any(isinstance(e, TimerStarted) for e in history)  # the hold never began
    assert isinstance(history[-1], WorkflowCancelled)
    assert Replayer([BlockSaga]).replay(history).status == "cancelled"


def test_a_cancel_recorded_before_the_wait_replays_as_it_was() -> None:
    """A history recorded before: the cancel was raised while the reservation was in flight, only
    the authorization was voided. It replays to the same end (no marker there: the old way)."""
    history = History(WorkflowRuntime([BlockSaga]), "sagas.block", {"order_id": 4})
    history.replay()  # authorize at 2
    history.complete(2, {"id": "wf-1/2"})
    history.replay()  # void registered at 4, reserve scheduled at 5
    history.cancel()
    history.add(
        ActivityScheduled, activity="payments.void", run_id="wf-1/7", compensation=True, compensates=2
    )
    history.complete(7)
    history.add(WorkflowCancelled, reason="customer cancelled", compensated=True)
    assert types(history.events) == [
        "started",
        "activity_scheduled",
        "activity_completed",
        "compensation_registered",
        "activity_scheduled",
        "cancel_requested",
        "activity_scheduled",
        "activity_completed",
        "cancelled",
    ]
    replayed = Replayer([BlockSaga]).replay(history.events)
    assert replayed.status == "cancelled"
    assert replayed.next_events == []


@workflow.defn(name="sagas.manual")
class ManualSaga:
    """The try/except form: the cancel is raised at once, a step in flight is not waited for."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        saga = Saga()
        try:
            auth = await workflow.execute_activity("payments.authorize", order)
            saga.add_compensation("payments.void", auth)
            hold = await workflow.execute_activity("inventory.reserve", order)
            saga.add_compensation("inventory.release", hold)
            captured: dict[str, Any] = await workflow.execute_activity("payments.capture", auth)
            return captured
        except BaseException:
            await saga.compensate()
            raise


async def test_the_try_except_form_undoes_what_was_registered_when_the_cancel_came() -> None:
    gate = Gate(blocks="inventory.reserve")
    async with WorkflowEnvironment([ManualSaga], activities=gate.activities(), replay_every_step=True) as env:
        await _cancel_while(env, gate, "m-1", env.start_workflow(ManualSaga, {"order_id": 5}, id="m-1"))
        with pytest.raises(WorkflowFailureError) as ended:
            await env.handle("m-1").result()
    assert ended.value.cancelled
    # Only the authorization's undo was registered when the cancel came.
    assert gate.calls == ["payments.authorize", "inventory.reserve", "payments.void"]


async def test_a_cancel_during_the_hold_undoes_both_steps_newest_first_once() -> None:
    gate = Gate()
    async with WorkflowEnvironment([BlockSaga], activities=gate.activities(), replay_every_step=True) as env:
        handle = await env.start_workflow(BlockSaga, {"order_id": 2}, id="o-2")
        await env.sleep(timedelta(minutes=30))
        await env.cancel("o-2", "customer cancelled")
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
    assert ended.value.cancelled
    assert ended.value.compensated
    assert gate.calls == ["payments.authorize", "inventory.reserve", "inventory.release", "payments.void"]


async def test_a_cancel_during_the_compensation_waits_for_it_and_changes_nothing() -> None:
    gate = Gate(blocks="inventory.release")
    async with WorkflowEnvironment([BlockSaga], activities=gate.activities(), replay_every_step=True) as env:
        handle = await env.start_workflow(BlockSaga, {"order_id": 3}, id="o-3")
        await env.sleep(timedelta(minutes=30))
        first = asyncio.ensure_future(env.cancel("o-3", "customer cancelled"))
        await asyncio.wait_for(gate.entered.wait(), timeout=5)  # compensating: release in flight
        second = asyncio.ensure_future(env.cancel("o-3", "operator cancelled again"))
        await asyncio.sleep(0)
        gate.release.set()
        await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
    assert ended.value.cancelled
    assert ended.value.compensated
    assert gate.undone() == Counter({"inventory.release": 1, "payments.void": 1})
    assert gate.calls[-2:] == ["inventory.release", "payments.void"]


@workflow.defn(name="sagas.abandons")
class AbandonsAStep:
    """Starts a slow step, yields to a zero-length timer, then cancels the step in flight."""

    @workflow.run
    async def run(self) -> str:
        slow = workflow.create_task(workflow.execute_activity("slow.step"))
        await workflow.sleep(0)
        slow.cancel()
        try:
            await slow
        except asyncio.CancelledError:
            return "cancelled in flight"
        return "finished first"


async def test_workflow_code_can_cancel_an_activity_in_flight() -> None:
    """A zero-length timer is due at once: it fires while the slow step runs (before, it waited for
    the step to finish, so the cancel always came too late)."""
    finished: list[str] = []
    cancelled: list[str] = []

    async def slow(ctx: RunContext) -> None:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled.append(ctx.run_id)
            raise
        finished.append(ctx.run_id)

    async with WorkflowEnvironment(
        [AbandonsAStep], activities={"slow.step": slow}, replay_every_step=True
    ) as env:
        result = await env.execute_workflow(AbandonsAStep, id="slow-1")
        history = env.history("slow-1")
    assert result == "cancelled in flight"
    # The code cancelled the step: so is its attempt (as the claimer does with a workflow's
    # CancelActivity), here before it got to run or at its first await; it never finishes, and
    # nothing of it reaches the history.
    (step,) = [e for e in history if isinstance(e, ActivityScheduled)]
    assert cancelled in ([], [step.run_id])
    assert finished == []
    assert history[-1].message_type == "workflow.completed"
    assert not any(e.message_type == "workflow.activity_completed" for e in history)
