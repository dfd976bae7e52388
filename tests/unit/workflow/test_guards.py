"""Each trap in workflow code fails at once with WorkflowDeterminismError saying what to use instead."""

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from slotflow import workflow
from slotflow.workflow import NotInWorkflow, WorkflowDeterminismError
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import History

_OTHER_LOOP = asyncio.new_event_loop()


async def _sleep() -> None:
    await asyncio.sleep(1)


async def _sleep0() -> None:
    await asyncio.sleep(0)


async def _wait_for() -> None:
    await asyncio.wait_for(asyncio.get_running_loop().create_future(), timeout=5)


async def _create_task() -> None:
    await asyncio.create_task(_step())


async def _ensure_future() -> None:
    await asyncio.ensure_future(_step())


async def _to_thread() -> None:
    await asyncio.to_thread(lambda: None)


async def _foreign_future() -> None:
    await _OTHER_LOOP.create_future()


async def _thread() -> None:
    threading.Thread(target=lambda: None).start()


async def _socket() -> None:
    socket.socket()


async def _connect() -> None:
    await asyncio.open_connection("localhost", 9)


async def _time_sleep() -> None:
    time.sleep(0.01)


async def _loop_time() -> None:
    asyncio.get_running_loop().time()


async def _step() -> int:
    return 1


async def _gather() -> None:
    await asyncio.gather(_step(), _step())


async def _task_group() -> None:
    async with asyncio.TaskGroup() as group:
        group.create_task(_step())


async def _event() -> None:
    await asyncio.Event().wait()


async def _queue() -> None:
    await asyncio.Queue[int]().get()


TRAPS: list[tuple[Callable[[], Awaitable[None]], str, str]] = [
    (_sleep, "asyncio.sleep", "workflow.sleep()"),
    (_sleep0, "asyncio.sleep(0)", "workflow.sleep()"),
    (_wait_for, "asyncio.wait_for", "workflow.wait_condition(fn, timeout=)"),
    (_create_task, "asyncio.create_task", "workflow.create_task()"),
    (_ensure_future, "asyncio.ensure_future", "workflow.create_task()"),
    (_to_thread, "asyncio.to_thread", "activity"),
    (_foreign_future, "of another event loop", "workflow.create_task()"),
    (_gather, "asyncio.gather", "workflow.gather()"),
    (_task_group, "asyncio.TaskGroup.create_task", "workflow.create_task()"),
    (_event, "asyncio.Event.wait", "workflow.wait_condition()"),
    (_queue, "asyncio.Queue.get", "workflow.wait_condition()"),
    (_thread, "threading.Thread.start", "activity"),
    (_socket, "socket.socket", "activity"),
    (_connect, "asyncio.open_connection", "activity"),
    (_time_sleep, "time.sleep", "workflow.sleep()"),
    (_loop_time, "loop.time()", "workflow.now()"),
]


def _runtime_for(trap: Callable[[], Awaitable[None]], *, swallow: bool = False) -> WorkflowRuntime:
    @workflow.defn(name="trap")
    class Trap:
        @workflow.run
        async def run(self) -> str:
            try:
                await trap()
            except WorkflowDeterminismError:
                if not swallow:
                    raise
            return "finished"

    return WorkflowRuntime([Trap])


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS, ids=[t[1] for t in TRAPS])
def test_each_trap_fails_with_what_to_use_instead(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    history = History(_runtime_for(trap), "trap")
    with pytest.raises(WorkflowDeterminismError) as caught:
        history.decide()
    error = caught.value
    assert used in error.used
    assert instead in str(error)
    assert error.workflow_id == "wf-1"
    assert error.sequence == 1


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS[:3], ids=[t[1] for t in TRAPS[:3]])
def test_catching_the_guard_error_does_not_hide_it(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    with pytest.raises(WorkflowDeterminismError, match="deterministic"):
        History(_runtime_for(trap, swallow=True), "trap").decide()


def test_workflow_tasks_and_gather_run_on_the_workflow_loop() -> None:
    @workflow.defn(name="tasks.ok")
    class Fine:
        @workflow.run
        async def run(self) -> list[Any]:
            first, second = await workflow.gather(_step(), workflow.execute_activity("a.one"))
            task = workflow.create_task(_step())
            return [first, second, await task]

    history = History(WorkflowRuntime([Fine]), "tasks.ok")
    history.decide()
    history.complete(2, "one")
    (done,) = history.decide().events
    assert done.result == [1, "one", 1]  # type: ignore[attr-defined]


def test_the_guards_pass_calls_through_outside_workflow_code() -> None:
    WorkflowRuntime([])
    time.sleep(0)
    socket.socket().close()
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()


async def test_decide_inside_a_running_asyncio_loop_leaves_that_loop_alone() -> None:
    history = History(_runtime_for(_sleep), "trap")
    running = asyncio.get_running_loop()
    with pytest.raises(WorkflowDeterminismError):
        history.decide()
    assert asyncio.get_running_loop() is running
    await asyncio.sleep(0)


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS, ids=[t[1] for t in TRAPS])
def test_each_trap_fails_the_same_inside_a_running_uvloop(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    """The orchestrator's entry point runs on uvloop (its `EVENT_LOOP` setting): the workflow
    loop must refuse the same calls there, and hand the service's loop back untouched."""

    async def decide_inside() -> None:
        running = asyncio.get_running_loop()
        with pytest.raises(WorkflowDeterminismError) as caught:
            History(_runtime_for(trap), "trap").decide()
        assert used in caught.value.used
        assert instead in str(caught.value)
        assert asyncio.get_running_loop() is running
        await asyncio.sleep(0)

    uvloop.run(decide_inside())


def test_primitives_outside_workflow_code_say_so() -> None:
    with pytest.raises(NotInWorkflow, match="only inside workflow code"):
        workflow.now()
