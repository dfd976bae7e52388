"""WorkflowEnvironment: activities in process, a virtual clock, signals, cancel, replay checks."""

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from slotflow import workflow
from slotflow.errors import TransientError
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.workflow import NonDeterminismError
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError
from tests.unit.workflow.workflows import Approval, Checkout, Deadline

CALLS: list[tuple[str, str, int]] = []


class CardDeclined(Exception):
    pass


def _activities(*, capture_fails: int = 0, capture_declines: bool = False) -> HandlerRegistry:
    registry = HandlerRegistry()
    attempts: Counter[str] = Counter()

    async def record(ctx: RunContext) -> None:
        CALLS.append((ctx.handler, ctx.run_id, ctx.attempt))

    async def authorize(ctx: RunContext) -> dict[str, str]:
        await record(ctx)
        return {"auth": f"A-{ctx.payload['order_id']}"}

    async def reserve(ctx: RunContext) -> dict[str, str]:
        await record(ctx)
        return {"hold": "H-1"}

    async def capture(ctx: RunContext) -> dict[str, str]:
        await record(ctx)
        attempts[ctx.run_id] += 1
        if capture_declines:
            raise CardDeclined("card declined")
        if attempts[ctx.run_id] <= capture_fails:
            raise TransientError("bank timed out")
        return {"id": "C-1"}

    async def undo(ctx: RunContext) -> None:
        await record(ctx)

    registry.register("payments.authorize", authorize)
    registry.register("inventory.reserve", reserve)
    registry.register("payments.capture", capture)
    registry.register("inventory.release", undo)
    registry.register("payments.void", undo)
    return registry


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()


async def test_the_order_saga_sleeps_a_day_in_milliseconds() -> None:
    async with WorkflowEnvironment([Checkout], activities=_activities(), replay_every_step=True) as env:
        start = env.now
        receipt = await env.execute_workflow(Checkout, {"order_id": 7}, id="order-7")
        assert receipt == {"order_id": 7, "capture": "C-1"}
        assert env.now - start == timedelta(hours=24)
        assert [name for name, _, _ in CALLS] == [
            "payments.authorize",
            "inventory.reserve",
            "payments.capture",
        ]
        assert [run for _, run, _ in CALLS] == ["order-7/2", "order-7/5", "order-7/10"]


async def test_retries_happen_in_the_environment_and_history_holds_one_result() -> None:
    async with WorkflowEnvironment([Checkout], activities=_activities(capture_fails=2)) as env:
        handle = await env.start_workflow(Checkout, {"order_id": 1}, id="o-1")
        assert (await handle.result())["capture"] == "C-1"
        assert [a for name, _, a in CALLS if name == "payments.capture"] == [1, 2, 3]
        results = [e for e in handle.history if e.message_type == "workflow.activity_completed"]
        assert len(results) == 3  # authorize, reserve, capture (once): nothing for the retries


async def test_a_declined_capture_releases_then_voids() -> None:
    async with WorkflowEnvironment([Checkout], activities=_activities(capture_declines=True)) as env:
        with pytest.raises(WorkflowFailureError) as caught:
            await env.execute_workflow(Checkout, {"order_id": 2}, id="o-2")
        assert (caught.value.error_type, caught.value.compensated) == ("CardDeclined", True)
        names = [name for name, _, _ in CALLS]
        assert names[-2:] == ["inventory.release", "payments.void"]
        assert names.count("payments.capture") == 1  # non-retryable: one attempt


async def test_signals_and_wait_condition_timeouts() -> None:
    async with WorkflowEnvironment([Approval, Deadline], replay_every_step=True) as env:
        approval = await env.start_workflow(Approval, id="a-1")
        await env.signal("a-1", "note", {"text": "hi"})
        await env.signal("a-1", "approve", {"who": "ann"})
        assert await approval.result() == {"by": "ann", "note": {"text": "hi"}}

        quick = await env.start_workflow(Deadline, id="d-1")
        await env.sleep(timedelta(minutes=10))
        await env.signal("d-1", "finish")
        assert await quick.result() == "done"
        slow = await env.start_workflow(Deadline, id="d-2")
        assert await slow.result() == "timed out"


async def test_a_workflow_waiting_for_a_signal_says_so() -> None:
    async with WorkflowEnvironment([Approval]) as env:
        handle = await env.start_workflow(Approval, id="a-2")
        with pytest.raises(Exception, match="send it a signal"):
            await handle.result()


async def test_cancel_compensates_and_ends_cancelled() -> None:
    async with WorkflowEnvironment([Checkout], activities=_activities(), replay_every_step=True) as env:
        handle = await env.start_workflow(Checkout, {"order_id": 3}, id="o-3")
        await env.sleep(timedelta(hours=2))
        await env.cancel("o-3", "customer cancelled")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
        assert caught.value.cancelled
        assert caught.value.compensated
        assert [name for name, _, _ in CALLS][-2:] == ["inventory.release", "payments.void"]


_RUNS = Counter[str]()


@workflow.defn(name="flaky.global")
class ReadsAGlobal:
    @workflow.run
    async def run(self) -> str:
        _RUNS["n"] += 1  # a changing global: a replay takes the other branch
        name = "a.first" if _RUNS["n"] == 1 else "a.second"
        await workflow.execute_activity(name)
        return name


async def test_replay_every_step_catches_code_that_changes_its_mind() -> None:
    async def ok(ctx: RunContext) -> None:
        return None

    _RUNS.clear()
    async with WorkflowEnvironment(
        [ReadsAGlobal], activities={"a.first": ok, "a.second": ok}, replay_every_step=True
    ) as env:
        with pytest.raises(NonDeterminismError, match=r"a\.second"):
            await env.execute_workflow(ReadsAGlobal, id="g-1")
    _RUNS.clear()
    async with WorkflowEnvironment([ReadsAGlobal], activities={"a.first": ok, "a.second": ok}) as env:
        assert await env.execute_workflow(ReadsAGlobal, id="g-2") == "a.first"  # unchecked: not seen


@workflow.defn(name="deadline.activity")
class Patient:
    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.execute_activity(
                "slow.flaky",
                retry=workflow.RetryPolicy(max_attempts=100, base=timedelta(seconds=5)),
                schedule_to_close=timedelta(seconds=30),
            )
        except workflow.ActivityTimeoutError as timeout:
            return timeout.error_type
        return "done"


async def test_schedule_to_close_stops_the_retries() -> None:
    async def flaky(ctx: RunContext) -> Any:
        raise TransientError("still down")

    async with WorkflowEnvironment([Patient], activities={"slow.flaky": flaky}) as env:
        assert await env.execute_workflow(Patient, id="p-1") == "ScheduleToCloseTimeout"


@workflow.defn(name="heartbeat.import")
class Import:
    @workflow.run
    async def run(self) -> Any:
        return await workflow.execute_activity(
            "files.import",
            retry=workflow.RetryPolicy(max_attempts=3, base=timedelta(seconds=1)),
            heartbeat_timeout=timedelta(milliseconds=200),
        )


async def test_a_silent_activity_times_out_and_its_retry_resumes_from_the_last_details() -> None:
    seen: list[tuple[int, Any]] = []

    async def import_rows(ctx: RunContext) -> Any:
        seen.append((ctx.attempt, ctx.heartbeat_details))
        start = ctx.heartbeat_details["row"] if ctx.heartbeat_details else 0
        for row in range(start, 10):
            ctx.heartbeat({"row": row})
            if ctx.attempt == 1 and row == 4:
                await asyncio.Event().wait()  # hangs here: no more heartbeats
            await asyncio.sleep(0.01)
        return {"imported_from": start}

    async with WorkflowEnvironment([Import], activities={"files.import": import_rows}) as env:
        handle = await env.start_workflow(Import, id="import-1")
        assert await handle.result() == {"imported_from": 4}
    assert seen == [(1, None), (2, {"row": 4})]
    failed_attempts = [e for e in handle.history if e.message_type == "workflow.activity_failed"]
    assert failed_attempts == []  # retried attempts are not history; the result is


@workflow.defn(name="heartbeat.once")
class SilentOnce:
    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.execute_activity(
                "files.silent",
                retry=workflow.RetryPolicy(max_attempts=1),
                heartbeat_timeout=timedelta(milliseconds=100),
            )
        except workflow.ActivityError as failed:
            return f"{failed.error_type}: {failed.error_message}"
        return "done"


async def test_an_activity_out_of_attempts_for_want_of_a_heartbeat_fails_naming_the_timeout() -> None:
    async def silent(ctx: RunContext) -> None:
        await asyncio.Event().wait()

    async with WorkflowEnvironment([SilentOnce], activities={"files.silent": silent}) as env:
        said = await env.execute_workflow(SilentOnce, id="silent-1")
    assert said.startswith("HeartbeatTimeout: no heartbeat within heartbeat_timeout 0.1 s")
