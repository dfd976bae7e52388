"""Process-wide guards: the calls workflow code must not make, refused while it runs.

The workflow's own loop (`_loop`) refuses asyncio's clock, executors, tasks and primitives. What
lives outside asyncio is refused by thin wrappers installed once per process (`install_guards`) on
the attributes workflow code reaches it by:

- threads, sockets, DNS and `time.sleep`;
- the host clock: `time.time`, `time.monotonic`, `time.perf_counter` (and their `_ns` forms);
- host randomness: the `random` module's functions, `uuid.uuid4` / `uuid1`, `os.urandom`,
  `os.getrandom`, and `secrets`;
- file I/O: `open` (`builtins.open`, `io.open`) and `pathlib.Path`'s `open`, `read_text`,
  `read_bytes`, `write_text`, `write_bytes`.

Each raises `WorkflowDeterminismError` naming the call and what to use instead (`workflow.now()`,
`workflow.random()`, `workflow.uuid4()`, an activity). Outside workflow code (no execution entered
on this thread: the orchestrator's own calls, activities, tests) a wrapper checks one thread-local
and passes the call through. Inside it, a call made by the standard library on the code's behalf
passes too (logging's record timestamp, `linecache` reading a traceback's source): it decides
nothing. The clock, randomness and file wrappers refuse only what workflow code, or a library it
calls that is not the standard library, calls itself.

Two things a wrapper on a module attribute cannot reach: names bound before the wrappers existed
(`from time import time`, `from uuid import uuid4`), and `datetime.datetime.now` / `utcnow` /
`today` and `datetime.date.today`, methods of immutable C types. `guard_namespaces` reaches them
where workflow code looks them up, in the globals of the modules that define workflow classes: a
name bound to a wrapped function is rebound to its wrapper, the `datetime` and `date` classes to
guarded stand-ins, and the `datetime` module to a copy holding those. The stand-ins make real
`datetime` objects (`datetime(2026, 1, 1)` is a `datetime.datetime`), pass `isinstance` and
`issubclass` both ways and validate in pydantic as the real types; only `type(x) is datetime`
tells them apart. Helpers in other modules that import the datetime types themselves are not
rebound: `slotflow workflow check` reports their clock reads before deploy.
"""

import builtins
import datetime as _datetime
import io
import os
import pathlib
import random
import secrets
import socket
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from slotflow.workflow._loop import IO, _local, _refuse

CLOCK = "the host clock reads differently on a replay; use workflow.now() (the decision's recorded time)"
TODAY = "the host clock reads differently on a replay; use workflow.now().date()"
RANDOM = (
    "host randomness draws differently on a replay; use workflow.random() (seeded by the run), or "
    "random.Random(workflow.random()) for choice, shuffle and the like"
)
UUID = "an id made on the host differs on a replay; use workflow.uuid4() (recorded once, replayed after)"
SECRETS = (
    "whatever workflow code holds is recorded in its history, so a secret drawn here is no secret; "
    "draw it in an activity"
)
FILES = "a file's contents change between runs; read and write files in an activity"
THREADS = "threads are not replayable; put the work in an activity"
TIME_SLEEP = "time.sleep blocks the orchestrator and a replay skips it; use workflow.sleep()"

#: The thread's running execution (`_loop.current()`), read directly: it is the wrappers' hot path.
_running = _local
_STDLIB = os.path.dirname(os.__file__) + os.sep
#: Per code file: whether it is the standard library (not its site-packages), asked once.
_stdlib_files: dict[str, bool] = {}


def _is_stdlib(frame: FrameType | None) -> bool:
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    known = _stdlib_files.get(filename)
    if known is None:
        inside = filename.startswith(_STDLIB) and "-packages" not in filename[len(_STDLIB) :]
        known = _stdlib_files[filename] = inside or filename.startswith("<frozen ")
    return known


def _refusing_anyone(original: Callable[..., Any], used: str, instead: str) -> Callable[..., Any]:
    """A wrapper refusing ``original`` to any code running inside workflow code."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _running.execution is not None:
            raise _refuse(used, instead)
        return original(*args, **kwargs)

    return guarded


def _refusing_workflow_code(original: Callable[..., Any], used: str, instead: str) -> Callable[..., Any]:
    """A wrapper refusing ``original`` to workflow code (and non-stdlib code it calls); the
    standard library calling it on the code's behalf passes."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _running.execution is not None and not _is_stdlib(sys._getframe(1)):
            raise _refuse(used, instead)
        return original(*args, **kwargs)

    return guarded


def _refusing_clock_read(original: Callable[[], Any], used: str, instead: str) -> Callable[[], Any]:
    """`_refusing_workflow_code` for a clock function, which takes no argument: the host's own
    calls (aiokafka's, asyncpg's) go through it, so it does without packing arguments."""

    def guarded() -> Any:
        if _running.execution is not None and not _is_stdlib(sys._getframe(1)):
            raise _refuse(used, instead)
        return original()

    return guarded


#: id(original) -> (original, its guarded stand-in): what `guard_namespaces` rebinds.
_stand_ins: dict[int, tuple[Any, Any]] = {}
_installed = False


def _wrap(
    owner: Any,
    attr: str,
    used: str,
    instead: str,
    make: Callable[[Callable[..., Any], str, str], Callable[..., Any]] = _refusing_workflow_code,
) -> None:
    original = getattr(owner, attr)
    guarded = make(original, used, instead)
    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    for name in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(original, name, None)
        if isinstance(value, str):
            setattr(guarded, name, value)
    setattr(owner, attr, guarded)
    _stand_ins[id(original)] = (original, guarded)


def install_guards() -> None:
    """Install every wrapper (once per process); see the module docstring."""
    global _installed
    if _installed:
        return
    _installed = True
    _wrap(threading.Thread, "start", "threading.Thread.start", THREADS, _refusing_anyone)
    _wrap(socket.socket, "__init__", "socket.socket", IO, _refusing_anyone)
    _wrap(socket, "create_connection", "socket.create_connection", IO, _refusing_anyone)
    _wrap(socket, "getaddrinfo", "socket.getaddrinfo", IO, _refusing_anyone)
    _wrap(time, "sleep", "time.sleep", TIME_SLEEP, _refusing_anyone)
    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"):
        _wrap(time, name, f"time.{name}", CLOCK, _refusing_clock_read)
    for name in random.__all__:
        value = getattr(random, name)
        if callable(value) and not isinstance(value, type):
            _wrap(random, name, f"random.{name}", RANDOM)
    _wrap(uuid, "uuid4", "uuid.uuid4", UUID)
    _wrap(uuid, "uuid1", "uuid.uuid1", UUID)
    _wrap(os, "urandom", "os.urandom", RANDOM)
    if hasattr(os, "getrandom"):
        _wrap(os, "getrandom", "os.getrandom", RANDOM)
    for name in ("token_bytes", "token_hex", "token_urlsafe", "randbelow", "randbits", "choice"):
        _wrap(secrets, name, f"secrets.{name}", SECRETS)
    _wrap(builtins, "open", "open", FILES)
    io.open = builtins.open  # one function, two names: `io.open is open` stays true
    for name in ("open", "read_text", "read_bytes", "write_text", "write_bytes"):
        _wrap(pathlib.Path, name, f"pathlib.Path.{name}", FILES)
    _install_datetime_stand_ins()


# -- datetime --------------------------------------------------------------------------------------


def _refuse_clock(used: str, instead: str = CLOCK) -> None:
    """Refuse a datetime stand-in's clock read to workflow code (frame 2: the stand-in's caller)."""
    if _running.execution is not None and not _is_stdlib(sys._getframe(2)):
        raise _refuse(used, instead)


class _StandInType(type):
    """The stand-ins' metaclass: a real `datetime`/`date` is an instance of its stand-in, and the
    real class a subclass of it, so checks written against either name agree."""

    _real: type

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls._real)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls._real)


class _GuardedDate(_datetime.date, metaclass=_StandInType):
    _real = _datetime.date

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _datetime.date(*args, **kwargs)

    @classmethod
    def today(cls) -> Any:
        _refuse_clock("datetime.date.today", TODAY)
        return _datetime.date.today()  # noqa: DTZ011 - the caller's own call, passed through

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler.generate_schema(_datetime.date)


class _GuardedDatetime(_datetime.datetime, metaclass=_StandInType):
    _real = _datetime.datetime

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _datetime.datetime(*args, **kwargs)  # noqa: DTZ001 - the caller's arguments, as given

    @classmethod
    def now(cls, tz: _datetime.tzinfo | None = None) -> Any:
        _refuse_clock("datetime.datetime.now")
        return _datetime.datetime.now(tz)

    @classmethod
    def utcnow(cls) -> Any:
        _refuse_clock("datetime.datetime.utcnow")
        return _datetime.datetime.utcnow()  # noqa: DTZ003 - the caller's own call, passed through

    @classmethod
    def today(cls) -> Any:
        _refuse_clock("datetime.datetime.today")
        return _datetime.datetime.today()  # noqa: DTZ002 - the caller's own call, passed through

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler.generate_schema(_datetime.datetime)


def _install_datetime_stand_ins() -> None:
    for stand_in, real in ((_GuardedDate, _datetime.date), (_GuardedDatetime, _datetime.datetime)):
        stand_in.__name__ = stand_in.__qualname__ = real.__name__
        stand_in.__module__ = real.__module__
        _stand_ins[id(real)] = (real, stand_in)
    module = types.ModuleType(_datetime.__name__, _datetime.__doc__)
    module.__dict__.update(vars(_datetime))
    module.date = _GuardedDate  # type: ignore[attr-defined]
    module.datetime = _GuardedDatetime  # type: ignore[attr-defined]
    _stand_ins[id(_datetime)] = (_datetime, module)


# -- names bound in workflow modules --------------------------------------------------------------

#: ids of the globals dicts already rebound.
_guarded_namespaces: set[int] = set()


def guard_namespaces(classes: Iterable[type[Any]]) -> None:
    """Rebind, in the globals of every module the methods of ``classes`` (and their bases) were
    defined in, each name bound to a guarded function, a datetime type or the datetime module
    (see the module docstring). Done once per module."""
    install_guards()
    for namespace in _namespaces_of(classes):
        if id(namespace) in _guarded_namespaces:
            continue
        _guarded_namespaces.add(id(namespace))
        for name, value in list(namespace.items()):
            found = _stand_ins.get(id(value))
            if found is not None and found[0] is value:
                namespace[name] = found[1]


def _namespaces_of(classes: Iterable[type[Any]]) -> list[dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for cls in classes:
        for klass in cls.__mro__:
            if klass is object:
                continue
            module = sys.modules.get(klass.__module__)
            if module is not None and module.__name__ not in _LIBRARY_MODULES:
                found.setdefault(id(module.__dict__), module.__dict__)
            for value in vars(klass).values():
                function = getattr(value, "__func__", value)
                namespace = getattr(function, "__globals__", None)
                if isinstance(namespace, dict) and namespace.get("__name__") not in _LIBRARY_MODULES:
                    found.setdefault(id(namespace), namespace)
    return list(found.values())


#: Modules never rebound: Python's own (a workflow class deriving from a stdlib class).
_LIBRARY_MODULES = frozenset({"builtins", "abc", "typing"})
