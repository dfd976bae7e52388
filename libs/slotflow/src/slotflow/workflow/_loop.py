"""The deterministic event loop workflow code runs on, and the guards around it.

Each execution has its own `Loop`, an asyncio event loop that the runtime steps by hand: it runs
ready callbacks in FIFO order, then checks `wait_condition` predicates in the order they were made,
until nothing can move, and returns. It has no clock and no I/O, so the same inputs always run the
same callbacks in the same order. Tasks are asyncio tasks on this loop (so cancellation is
`asyncio.CancelledError` at the current await, as everywhere in asyncio), but workflow code makes
them only through the runtime: `workflow.create_task`, `workflow.gather`.

Everything else of asyncio is refused with `WorkflowDeterminismError` and a message naming what to
use instead: the loop's clock (`asyncio.sleep`, `wait_for` / `timeout` deadlines, `call_later`,
`loop.time()`), executors and threads (`to_thread`), sockets and subprocesses, a bare `yield`
(`asyncio.sleep(0)`), an await on a future of another loop, and asyncio's own tasks, combinators and
primitives (`create_task`, `gather`, `wait`, `shield`, `TaskGroup`, `Event`, `Lock`, `Queue`): one
spelling for each thing, the one `slotflow workflow check` accepts. What lives outside asyncio
(threads, sockets, `time.sleep`, the host clock, randomness, files) is refused by thin wrappers
installed once (`_guards.install_guards`), which check `current()`; outside workflow code they only
pass calls through.
"""

import asyncio
import contextvars
import inspect
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from types import FrameType
from typing import Any, Protocol


class _Running(threading.local):
    """Per thread: the execution whose code is running. The class attribute is every thread's
    default, so reading it never raises (a missing thread-local attribute costs an exception: the
    guards read this on every call they wrap)."""

    execution: Any = None


_local = _Running()
_ASYNCIO_DIR = os.path.dirname(asyncio.__file__)


class Guarded(Protocol):
    """What the loop needs from the execution running workflow code."""

    loop: "Loop"

    def refuse(self, used: str, instead: str) -> BaseException: ...


def current() -> Any:
    """The execution whose workflow code runs on this thread, or None."""
    return _local.execution


def enter(execution: Guarded) -> tuple[Any, Any]:
    """Mark this thread as running ``execution``'s code; returns what `leave` restores."""
    previous = (_local.execution, asyncio._get_running_loop())
    _local.execution = execution
    asyncio._set_running_loop(execution.loop)
    return previous


def leave(previous: tuple[Any, Any]) -> None:
    _local.execution = previous[0]
    asyncio._set_running_loop(previous[1])


def _refuse(used: str, instead: str) -> BaseException:
    execution: Guarded | None = _local.execution
    if execution is None:  # pragma: no cover - workflow loops only run inside `enter`
        return RuntimeError(f"{used} outside workflow code")
    return execution.refuse(used, instead)


def _asyncio_caller(frame: FrameType | None) -> str:
    """The outermost asyncio function of the innermost asyncio frames (`asyncio.sleep`), or ''."""
    return _outermost_asyncio(frame)[1]


def _close_handed_over(frame: FrameType | None) -> None:
    """Close the coroutines a refused asyncio call was handed (`gather(a(), b())`), so the refusal
    is the only error and no "coroutine was never awaited" warning follows it."""
    while frame is not None and frame.f_code.co_filename.startswith(_ASYNCIO_DIR):
        for value in list(frame.f_locals.values()):
            for item in value if isinstance(value, tuple | list) else (value,):
                if isinstance(item, Coroutine) and inspect.getcoroutinestate(item) == inspect.CORO_CREATED:
                    item.close()
        frame = frame.f_back


def _outermost_asyncio(frame: FrameType | None) -> tuple[str, str]:
    """(file name, `asyncio.<function>`) of the asyncio call workflow code made, or ('', '')."""
    found = ("", "")
    while frame is not None and frame.f_code.co_filename.startswith(_ASYNCIO_DIR):
        found = (os.path.basename(frame.f_code.co_filename), f"asyncio.{frame.f_code.co_qualname}")
        frame = frame.f_back
    return found


SLEEP = "asyncio.sleep is a host timer a replay would not see; use workflow.sleep()"
_INSTEAD = {
    "asyncio.sleep": SLEEP,
    "asyncio.wait_for": "asyncio timeouts read the host clock; use workflow.wait_condition(fn, timeout=)",
    "asyncio.wait": "asyncio timeouts read the host clock; use workflow.wait_condition(fn, timeout=)",
    "asyncio.timeout": "asyncio timeouts read the host clock; use workflow.wait_condition(fn, timeout=)",
    "asyncio.to_thread": "threads are not replayable; put blocking work in an activity",
}
TASKS = (
    "asyncio tasks and combinators are not the workflow's; use workflow.create_task() or workflow.gather()"
)
PRIMITIVES = (
    "asyncio events, locks and queues wait outside the workflow's order; use workflow.wait_condition()"
)
_BY_METHOD = {
    "call_later": "asyncio timers read the host clock; use workflow.sleep()",
    "call_at": "asyncio timers read the host clock; use workflow.sleep()",
    "time": "the loop's clock is the host clock; use workflow.now()",
    "run_in_executor": "threads are not replayable; put blocking work in an activity",
}
IO = "I/O belongs in an activity; workflow code only decides"
_PRIMITIVE_MODULES = frozenset({"locks.py", "queues.py"})
_IO_MODULES = frozenset({"streams.py", "subprocess.py", "base_events.py", "selector_events.py"})


def _for_module(module: str, used: str) -> str:
    if module in _PRIMITIVE_MODULES:
        return PRIMITIVES
    if module in _IO_MODULES:
        return IO
    return _INSTEAD.get(used) or TASKS


def _refusing(name: str) -> Callable[..., Any]:
    def refused(self: asyncio.AbstractEventLoop, *args: Any, **kwargs: Any) -> Any:
        for arg in args:  # a coroutine handed over would warn "never awaited"
            if isinstance(arg, Coroutine):
                arg.close()
        used = _asyncio_caller(sys._getframe(1)) or f"asyncio loop.{name}()"
        raise _refuse(used, _INSTEAD.get(used) or _BY_METHOD.get(name) or IO)

    refused.__name__ = name
    return refused


class _Refusing(asyncio.AbstractEventLoop):
    """Every event-loop method refuses; `Loop` re-enables the clock-free ones."""


for _name in dir(asyncio.AbstractEventLoop):
    if not _name.startswith("_") and callable(getattr(asyncio.AbstractEventLoop, _name)):
        setattr(_Refusing, _name, _refusing(_name))


class Condition:
    __slots__ = ("future", "predicate")

    def __init__(self, predicate: Callable[[], bool], future: "asyncio.Future[Any]") -> None:
        self.predicate = predicate
        self.future = future


class _Ready:
    """A callback the loop runs next (asyncio's Handle, without what this loop never needs)."""

    __slots__ = ("args", "callback", "cancelled", "context")

    def __init__(
        self, callback: Callable[..., object], args: tuple[Any, ...], context: contextvars.Context | None
    ):
        self.callback = callback
        self.args = args
        self.context = context
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop(_Refusing):
    """Ready callbacks in FIFO order, then `wait_condition` predicates in creation order."""

    def __init__(self) -> None:
        self.ready: deque[_Ready] = deque()
        self.conditions: list[Condition] = []
        self.tasks: list[asyncio.Task[Any]] = []
        #: Exceptions raised by callbacks (a guard error in a done-callback, say).
        self.errors: list[BaseException] = []
        #: `SystemExit` or `KeyboardInterrupt` from workflow code (only its code runs on this loop):
        #: they fail that workflow, never the process deciding it (a task also keeps its own).
        self.exits: list[BaseException] = []
        self.disposed = False

    # -- what asyncio's clock-free machinery needs ---------------------------------------------

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> "_Ready":
        handle = _Ready(callback, args, context)
        self.ready.append(handle)
        return handle

    def create_future(self) -> "asyncio.Future[Any]":
        module, used = _outermost_asyncio(sys._getframe(1))
        if module:
            _close_handed_over(sys._getframe(1))
            raise _refuse(used, _for_module(module, used))
        return asyncio.Future(loop=self)

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> "asyncio.Task[Any]":
        module, used = _outermost_asyncio(sys._getframe(1))
        if module:
            coro.close()
            _close_handed_over(sys._getframe(1))
            raise _refuse(used, TASKS)
        return self.spawn(coro, name or "task", context)

    def spawn(
        self, coro: Coroutine[Any, Any, Any], name: str, context: contextvars.Context | None = None
    ) -> "asyncio.Task[Any]":
        task = asyncio.Task(_Checked(self, coro), loop=self, name=name, context=context)
        self.tasks.append(task)
        return task

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return True

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            not self.disposed
            and isinstance(exc, BaseException)
            and "Future exception was never" not in str(context.get("message", ""))
        ):
            self.errors.append(exc)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        return None

    # -- stepping ------------------------------------------------------------------------------

    def run(self) -> None:
        """Run until every task waits for something only a new history event can bring."""
        ready = self.ready
        while True:
            while ready:
                handle = ready.popleft()
                if handle.cancelled:
                    continue
                try:
                    if handle.context is None:
                        handle.callback(*handle.args)
                    else:
                        handle.context.run(handle.callback, *handle.args)
                except (SystemExit, KeyboardInterrupt) as exc:
                    self.exits.append(exc)
                except BaseException as exc:  # noqa: BLE001 - asyncio's contract: report, go on
                    self.call_exception_handler({"message": "callback failed", "exception": exc})
            if not self.conditions or not self._check_conditions():
                return

    def _check_conditions(self) -> bool:
        moved = False
        for condition in list(self.conditions):
            if condition.future.done():
                self.conditions.remove(condition)
            else:
                try:
                    met = condition.predicate()
                except BaseException as err:  # noqa: BLE001 - raised at the wait_condition that owns it
                    self.conditions.remove(condition)
                    condition.future.set_exception(err)
                    moved = True
                    continue
                if met:
                    self.conditions.remove(condition)
                    condition.future.set_result(True)
                    moved = True
        return moved


class _Checked(Coroutine[Any, Any, Any]):
    """Wraps a task's coroutine to refuse what it must not await (a bare yield, a foreign future)."""

    __slots__ = ("_coro", "_loop")

    def __init__(self, loop: Loop, coro: Coroutine[Any, Any, Any]) -> None:
        self._loop = loop
        self._coro = coro

    def send(self, value: Any) -> Any:
        return self._check(self._coro.send(value))

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if val is None and isinstance(typ, BaseException) else (typ(val) if val is None else val)
        return self._check(self._coro.throw(exc))

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover - tasks call send/throw
        return (yield from self._coro.__await__())

    def _check(self, yielded: Any) -> Any:
        while True:
            if isinstance(yielded, asyncio.Future) and yielded.get_loop() is self._loop:
                return yielded
            if yielded is None:
                error = _refuse(
                    "asyncio.sleep(0) (a bare yield)",
                    "yielding to the host loop means nothing on replay; use workflow.sleep() or "
                    "workflow.wait_condition()",
                )
            else:
                error = _refuse(
                    f"an await on a {type(yielded).__name__} of another event loop",
                    "futures and tasks from outside the workflow cannot replay; await workflow "
                    "primitives, workflow.create_task() or workflow.gather()",
                )
            yielded = self._coro.throw(error)
