"""Each trap in workflow code fails at once with WorkflowDeterminismError saying what to use instead."""

import asyncio
import datetime as datetime_module
import logging
import os
import random
import secrets
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from pathlib import Path
from time import monotonic as bound_before_the_guards
from typing import Any

import pytest
import uvloop

from slotflow import workflow
from slotflow.runs import RunContext
from slotflow.workflow import NotInWorkflow, WorkflowDeterminismError
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment
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


async def _time_time() -> None:
    time.time()


async def _time_monotonic() -> None:
    time.monotonic()


async def _bound_before() -> None:
    bound_before_the_guards()  # `from time import monotonic as ...`, bound at import


async def _datetime_now() -> None:
    datetime.now(UTC)


async def _datetime_utcnow() -> None:
    datetime_module.datetime.utcnow()  # noqa: DTZ003 - the trap under test


async def _date_today() -> None:
    date.today()  # noqa: DTZ011 - the trap under test


async def _random() -> None:
    random.random()


async def _random_choice() -> None:
    random.choice([1, 2])


async def _uuid4() -> None:
    uuid.uuid4()


async def _urandom() -> None:
    os.urandom(8)


async def _secrets() -> None:
    secrets.token_hex()


async def _open() -> None:
    with open(__file__) as source:
        source.read()


async def _path_read() -> None:
    Path(__file__).read_text()


async def _path_write(tmp: Path = Path("/nonexistent/slotflow-guard-test")) -> None:
    tmp.write_text("x")


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
    (_time_time, "time.time", "workflow.now()"),
    (_time_monotonic, "time.monotonic", "workflow.now()"),
    (_bound_before, "time.monotonic", "workflow.now()"),
    (_datetime_now, "datetime.datetime.now", "workflow.now()"),
    (_datetime_utcnow, "datetime.datetime.utcnow", "workflow.now()"),
    (_date_today, "datetime.date.today", "workflow.now().date()"),
    (_random, "random.random", "workflow.random()"),
    (_random_choice, "random.choice", "random.Random(workflow.random())"),
    (_uuid4, "uuid.uuid4", "workflow.uuid4()"),
    (_urandom, "os.urandom", "workflow.random()"),
    (_secrets, "secrets.token_hex", "activity"),
    (_open, "open", "activity"),
    (_path_read, "pathlib.Path.read_text", "activity"),
    (_path_write, "pathlib.Path.write_text", "activity"),
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


TRAP_IDS = [trap.__name__.strip("_") for trap, _, _ in TRAPS]


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS, ids=TRAP_IDS)
def test_each_trap_fails_with_what_to_use_instead(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    history = History(_runtime_for(trap), "trap")
    with pytest.raises(WorkflowDeterminismError) as caught:
        history.replay()
    error = caught.value
    assert used in error.used
    assert instead in str(error)
    assert error.workflow_id == "wf-1"
    assert error.sequence == 1


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS[:3], ids=TRAP_IDS[:3])
def test_catching_the_guard_error_does_not_hide_it(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    with pytest.raises(WorkflowDeterminismError, match="deterministic"):
        History(_runtime_for(trap, swallow=True), "trap").replay()


def test_workflow_tasks_and_gather_run_on_the_workflow_loop() -> None:
    @workflow.defn(name="tasks.ok")
    class Fine:
        @workflow.run
        async def run(self) -> list[Any]:
            first, second = await workflow.gather(_step(), workflow.execute_activity("a.one"))
            task = workflow.create_task(_step())
            return [first, second, await task]

    history = History(WorkflowRuntime([Fine]), "tasks.ok")
    history.replay()
    history.complete(2, "one")
    (done,) = history.replay().events
    assert done.result == [1, "one", 1]  # type: ignore[attr-defined]


def test_the_guards_pass_calls_through_outside_workflow_code(tmp_path: Path) -> None:
    _runtime_for(_time_time)  # installs the guards and rebinds this module's names
    time.sleep(0)
    socket.socket().close()
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    assert time.time() > 0
    assert time.monotonic() > 0
    assert bound_before_the_guards() > 0
    assert datetime.now(UTC).year >= 2026
    assert date.today().year >= 2026  # noqa: DTZ011 - the guard passes it through outside workflow code
    assert 0 <= random.random() < 1
    assert uuid.uuid4().version == 4
    assert len(os.urandom(4)) == 4
    assert secrets.token_hex(2)
    (tmp_path / "note").write_text("kept")
    assert (tmp_path / "note").read_text() == "kept"
    with open(tmp_path / "note") as note:
        assert note.read() == "kept"


def test_the_datetime_stand_ins_make_and_recognise_real_datetimes() -> None:
    """This module's `datetime` and `date` are rebound to guarded stand-ins (it defines workflow
    classes): what they make and what they accept must be the real types'."""
    from pydantic import BaseModel

    _runtime_for(_time_time)
    real_module = sys.modules["datetime"]  # never rebound: the module itself
    real_datetime, real_date = real_module.datetime, real_module.date
    assert datetime is not real_datetime
    assert datetime_module is not real_module
    made = datetime(2026, 1, 2, tzinfo=UTC)
    assert type(made) is real_datetime
    assert type(datetime.fromisoformat("2026-01-02T00:00:00+00:00")) is real_datetime
    assert type(datetime_module.datetime(2026, 1, 2, tzinfo=UTC)) is real_datetime
    assert type(date(2026, 1, 2)) is real_date
    assert datetime_module.timedelta is real_module.timedelta
    real = real_datetime.now(UTC)
    assert isinstance(real, datetime)
    assert isinstance(real, date)
    assert issubclass(real_datetime, datetime)
    assert datetime.max.replace(tzinfo=UTC) == real_datetime.max.replace(tzinfo=UTC)
    assert repr(datetime) == "<class 'datetime.datetime'>"

    class Stamped(BaseModel):
        at: datetime
        day: date

    stamped = Stamped(at="2026-01-02T03:04:05Z", day="2026-01-02")  # type: ignore[arg-type]
    assert type(stamped.at) is real_datetime
    assert stamped.day == real_date(2026, 1, 2)


def test_logging_in_workflow_code_reads_the_clock_through_the_standard_library(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`logging` stamps its records with `time.time()`: the standard library calling a guarded
    function on the code's behalf passes, so workflow code can log."""

    @workflow.defn(name="logs")
    class Logs:
        @workflow.run
        async def run(self) -> str:
            logging.getLogger("tests.workflow").warning("deciding %s", workflow.info().workflow_id)
            return "logged"

    with caplog.at_level(logging.WARNING, logger="tests.workflow"):
        (done,) = History(WorkflowRuntime([Logs]), "logs").replay().events
    assert done.result == "logged"  # type: ignore[attr-defined]
    assert [r.getMessage() for r in caplog.records] == ["deciding wf-1"]


async def test_decide_inside_a_running_asyncio_loop_leaves_that_loop_alone() -> None:
    history = History(_runtime_for(_sleep), "trap")
    running = asyncio.get_running_loop()
    with pytest.raises(WorkflowDeterminismError):
        history.replay()
    assert asyncio.get_running_loop() is running
    await asyncio.sleep(0)


@pytest.mark.parametrize(("trap", "used", "instead"), TRAPS, ids=TRAP_IDS)
def test_each_trap_fails_the_same_inside_a_running_uvloop(
    trap: Callable[[], Awaitable[None]], used: str, instead: str
) -> None:
    """The orchestrator's entry point runs on uvloop (its `EVENT_LOOP` setting): the workflow
    loop must refuse the same calls there, and hand the service's loop back untouched."""

    async def decide_inside() -> None:
        running = asyncio.get_running_loop()
        with pytest.raises(WorkflowDeterminismError) as caught:
            History(_runtime_for(trap), "trap").replay()
        assert used in caught.value.used
        assert instead in str(caught.value)
        assert asyncio.get_running_loop() is running
        await asyncio.sleep(0)

    uvloop.run(decide_inside())


def test_primitives_outside_workflow_code_say_so() -> None:
    with pytest.raises(NotInWorkflow, match="only inside workflow code"):
        workflow.now()


async def test_activity_code_reads_the_clock_randomness_and_files_freely(tmp_path: Path) -> None:
    """The guards bind workflow code only: an activity (here in WorkflowEnvironment, in production
    on a claimer) runs outside it, even while a workflow of the same module is mid-decision."""
    note = tmp_path / "note"
    note.write_text("from a file")

    async def touches_the_world(ctx: RunContext) -> dict[str, Any]:
        with open(note) as source:
            text = source.read()
        return {
            "text": text,
            "clock": time.time() > 0 and datetime.now(UTC).year >= 2026,
            "draw": 0 <= random.random() < 1,
            "id": str(uuid.uuid4()),
        }

    @workflow.defn(name="uses.activity")
    class UsesActivity:
        @workflow.run
        async def run(self) -> dict[str, Any]:
            result: dict[str, Any] = await workflow.execute_activity("touch.world")
            return result

    async with WorkflowEnvironment([UsesActivity], activities={"touch.world": touches_the_world}) as env:
        result = await env.execute_workflow(UsesActivity, id="act-1")
    assert result["text"] == "from a file"
    assert result["clock"]
    assert result["draw"]
