"""The offline environment cancels an activity its workflow abandons, as the claimer does: the
attempt gets CancelledError at its current await (a thread handler at its next heartbeat),
`ctx.is_cancelled()` turns true, no retry starts, and its outcome is dropped."""

import asyncio
import dataclasses
import threading
from datetime import timedelta

import pytest

from slotflow import workflow
from slotflow.runs import RunContext
from slotflow.testing import run_context
from slotflow.workflow import RetryPolicy
from slotflow.workflow.commands import CancelActivity, Decision
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError
from tests.unit.workflow.helpers import History, types


@workflow.defn(name="cancellation.waits_on_a_step")
class WaitsOnAStep:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity(
            "slow.step", retry=RetryPolicy(max_attempts=5, base=timedelta(seconds=1))
        )
        return "done"


async def test_a_cancelled_workflow_cancels_its_running_activity_mid_work() -> None:
    started = asyncio.Event()
    seen: list[str] = []

    async def slow(ctx: RunContext) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(f"cancelled, is_cancelled={ctx.is_cancelled()}")  # cleanup runs here
            raise
        seen.append("finished")

    async with WorkflowEnvironment([WaitsOnAStep], activities={"slow.step": slow}) as env:
        # The start runs the workflow until its step is done: from a task, the test lands its
        # cancel while the step waits.
        running = asyncio.create_task(env.execute_workflow(WaitsOnAStep, id="wf-1"))
        await asyncio.wait_for(started.wait(), 5)
        await env.cancel("wf-1", "customer cancelled")
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(running, 5)
        history = env.history("wf-1")
    assert ended.value.cancelled
    assert seen == ["cancelled, is_cancelled=True"]
    assert [e.message_type for e in history].count("workflow.activity_scheduled") == 1
    assert not any(
        e.message_type in ("workflow.activity_completed", "workflow.activity_failed") for e in history
    )


async def test_an_activity_waiting_for_its_retry_never_starts_again_after_the_cancel() -> None:
    attempts: list[int] = []

    async def flaky(ctx: RunContext) -> None:
        attempts.append(ctx.attempt)
        raise ConnectionError("down")

    async with WorkflowEnvironment([WaitsOnAStep], activities={"slow.step": flaky}) as env:
        handle = await env.start_workflow(WaitsOnAStep, id="wf-2")
        await asyncio.sleep(0.05)  # the first attempt fails; its retry waits on the virtual clock
        assert attempts == [1]
        await env.cancel("wf-2")
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await env.sleep(timedelta(minutes=5))
    assert attempts == [1]


async def test_a_thread_handler_learns_of_its_cancellation_at_its_next_heartbeat() -> None:
    """A thread cannot be interrupted: `ctx.heartbeat` raises CancelledError in it once the run's
    cancellation was asked for (Temporal's rule for sync activities); on the loop it does not (an
    `async def` handler gets it at its current await)."""
    cancellation = threading.Event()
    beats: list[str | None] = []
    ctx = run_context({}, job_id="wf", workflow_id="wf", sequence=2, kind="activity")
    ctx = dataclasses.replace(ctx, on_heartbeat=beats.append, cancellation=cancellation)
    await asyncio.to_thread(ctx.heartbeat, {"row": 1})
    assert not ctx.is_cancelled()
    cancellation.set()
    assert ctx.is_cancelled()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.to_thread(ctx.heartbeat, {"row": 2})
    ctx.heartbeat({"row": 3})  # on the loop: no raise
    assert beats == ['{"row": 1}', '{"row": 3}']


@workflow.defn(name="cancellation.drops_a_step")
class DropsAStep:
    """Starts a step, and cancels it when the `stop` signal comes."""

    @workflow.run
    async def run(self) -> str:
        step = workflow.create_task(workflow.execute_activity("slow.step"))
        await workflow.wait_signal("stop")
        step.cancel()
        try:
            await step
        except asyncio.CancelledError:
            return "dropped"
        return "finished first"


@workflow.defn(name="cancellation.drops_a_step_and_waits")
class DropsAStepAndWaits:
    """Cancels its step when `stop` comes, then sleeps an hour."""

    @workflow.run
    async def run(self) -> str:
        step = workflow.create_task(workflow.execute_activity("slow.step"))
        await workflow.wait_signal("stop")
        step.cancel()
        await workflow.sleep(timedelta(hours=1))
        return "finished"


RUNTIME = WorkflowRuntime([WaitsOnAStep, DropsAStep, DropsAStepAndWaits])


def _cancels(decision: Decision) -> list[tuple[int, str, str]]:
    return [(c.sequence, c.run_id, c.activity) for c in decision.commands if isinstance(c, CancelActivity)]


def test_the_runtime_asks_for_a_cancelled_steps_run_to_be_cancelled_once() -> None:
    """Once, in the decision where the code stopped waiting: a replay of the same history (a fresh
    runtime, as after a restart) sends it no more."""
    history = History(RUNTIME, "cancellation.drops_a_step")
    assert types(history.replay().events) == ["activity_scheduled"]
    history.signal("stop")
    decision = history.replay()
    assert types(decision.events) == ["completed"]
    assert _cancels(decision) == [(2, "wf-1/2", "slow.step")]
    again = WorkflowRuntime([DropsAStep]).replay(history.events[:-1], now=history.now)
    assert _cancels(again) == [(2, "wf-1/2", "slow.step")]  # the same decision, made again
    replayed = WorkflowRuntime([DropsAStep]).replay(history.events, now=history.now)
    assert replayed.events == []
    assert _cancels(replayed) == []


def test_a_cancel_request_asks_for_the_awaited_steps_run_to_be_cancelled() -> None:
    history = History(RUNTIME, "cancellation.waits_on_a_step")
    history.replay()
    history.cancel()
    decision = history.replay()
    assert types(decision.events) == ["cancelled"]
    assert _cancels(decision) == [(2, "wf-1/2", "slow.step")]


def test_a_step_whose_outcome_came_is_not_cancelled() -> None:
    history = History(RUNTIME, "cancellation.waits_on_a_step")
    history.replay()
    history.complete(2, "ok")
    decision = history.replay()
    assert types(decision.events) == ["completed"]
    assert _cancels(decision) == []


def test_a_replay_notes_the_steps_its_code_had_abandoned_for_a_rebuild_to_ask_again() -> None:
    """The decision that abandons a step sends its cancel; a fresh runtime replaying past it sends
    nothing, and says which steps the replayed code had abandoned (`abandoned_earlier`)."""
    history = History(RUNTIME, "cancellation.drops_a_step_and_waits")
    history.replay()
    history.signal("stop")
    decision = history.replay()
    assert _cancels(decision) == [(2, "wf-1/2", "slow.step")]
    assert types(decision.events) == ["timer_started"]
    assert decision.abandoned_earlier == []
    history.signal("nudge")  # a later input: the stop's decision is history now
    replayed = WorkflowRuntime([DropsAStepAndWaits]).replay(history.events, now=history.now)
    assert replayed.events == []
    assert _cancels(replayed) == []
    assert replayed.abandoned_earlier == [2]
    history.complete(2, "late")  # an outcome came after all: nothing left to cancel
    replayed = WorkflowRuntime([DropsAStepAndWaits]).replay(history.events, now=history.now)
    assert replayed.abandoned_earlier == [2]  # the orchestrator keeps only what is still pending
