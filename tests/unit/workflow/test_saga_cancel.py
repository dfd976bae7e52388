"""A cancel at any step of a saga written with `async with Saga()`: during a forward step, during
the hold, during the compensation itself. Every compensation registered by then runs exactly
once, newest first; the in-flight step's late result changes nothing. And the test environment
lets workflow code cancel an activity in flight (a due timer fires while activities run)."""

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts.workflows import ActivityScheduled, WorkflowCancelled
from slotflow.runs import RunContext
from slotflow.workflow import Saga
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError


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


async def test_a_cancel_during_a_forward_step_undoes_the_steps_done_once() -> None:
    gate = Gate(blocks="inventory.reserve")
    async with WorkflowEnvironment([BlockSaga], activities=gate.activities(), replay_every_step=True) as env:
        await _cancel_while(env, gate, "o-1", env.start_workflow(BlockSaga, {"order_id": 1}, id="o-1"))
        with pytest.raises(WorkflowFailureError) as ended:
            await env.handle("o-1").result()
        history = env.history("o-1")
    assert ended.value.cancelled
    assert ended.value.compensated
    # The reservation in flight finished after the cancel: its result was dropped, its undo never
    # registered; the authorization, registered, was voided once.
    assert gate.calls == ["payments.authorize", "inventory.reserve", "payments.void"]
    undo = [
        (e.activity, e.compensates) for e in history if isinstance(e, ActivityScheduled) and e.compensation
    ]
    assert undo == [("payments.void", 2)]
    assert isinstance(history[-1], WorkflowCancelled)


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

    async def slow(ctx: RunContext) -> None:
        await asyncio.sleep(0.05)
        finished.append(ctx.run_id)

    async with WorkflowEnvironment(
        [AbandonsAStep], activities={"slow.step": slow}, replay_every_step=True
    ) as env:
        result = await env.execute_workflow(AbandonsAStep, id="slow-1")
        history = env.history("slow-1")
    assert result == "cancelled in flight"
    # The step still ran to its end (nothing stops an attempt already running); its late result
    # came after the run ended and answered nothing.
    (step,) = [e for e in history if isinstance(e, ActivityScheduled)]
    assert finished == [step.run_id]
    assert history[-1].message_type == "workflow.completed"
    assert not any(e.message_type == "workflow.activity_completed" for e in history)
