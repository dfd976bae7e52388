"""Handlers by name: user code registers with `@handler("payouts.pay_merchants")`.

A claimer imports the modules named in its settings at start-up; importing a module runs its
decorators, which fill the registry. A JobDue names its handler; a name nobody registered is a
permanent failure (`UnknownHandler`), dead-lettered so that a redrive after a deploy completes it.

Where a handler runs: an `async def` on the claimer's event loop; a plain `def` in the claimer's
bounded thread pool, so a blocking call (`time.sleep`, a sync driver) cannot freeze the loop that
renews leases; with ``runs_in="process"`` a plain `def` runs in a process pool, for CPU-bound
work that would hold the GIL (it gets a context without pools: see `RunContext.detached`).
"""

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.errors import ConfigurationError, PermanentError
from slotflow.runs.context import RunContext

HandlerFn = Callable[[RunContext], Awaitable[Any]]
F = TypeVar("F", bound=Callable[[RunContext], Any])
RunsIn = Literal["loop", "thread", "process"]

_NAME = re.compile(IDENTIFIER_PATTERN)


class UnknownHandler(PermanentError):
    """No handler is registered under the run's handler name in this claimer."""

    reason: ClassVar[str] = "unknown_handler"


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler and where the claimer runs it."""

    name: str
    fn: Callable[[RunContext], Any]
    runs_in: RunsIn


def is_async_handler(fn: Callable[..., Any]) -> bool:
    """An `async def`, a partial of one, or an object whose `__call__` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn):
        return False
    call = inspect.getattr_static(type(fn), "__call__", None)  # inherited ones included
    return call is not None and inspect.iscoroutinefunction(call)


def _runs_in(name: str, fn: Callable[..., Any], runs_in: RunsIn | None) -> RunsIn:
    is_async = is_async_handler(fn)
    if runs_in is None:
        return "loop" if is_async else "thread"
    if is_async and runs_in != "loop":
        raise ConfigurationError(f"handler {name!r} is async: it runs on the loop, not in a {runs_in}")
    if not is_async and runs_in == "loop":
        raise ConfigurationError(f"handler {name!r} is a plain def: it would block the loop; use a thread")
    return runs_in


class HandlerRegistry:
    """Handler functions by name; one per process is usual (`REGISTRY`)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._downstreams: dict[str, tuple[str, ...]] = {}

    def register(
        self, name: str, fn: F, *, downstreams: Iterable[str] = (), runs_in: RunsIn | None = None
    ) -> F:
        """Register ``fn`` under ``name``; a second, different function under one name is an error.

        ``downstreams`` names the dependencies ``fn`` calls: each gets a retry budget and a circuit
        breaker shared by every claimer (docs/claimer.md, "Retry budgets and circuit breakers").
        ``runs_in``: default the loop for an `async def` and a thread for a plain `def`;
        "process" runs a plain `def` in the claimer's process pool.
        """
        if _NAME.match(name) is None:
            raise ConfigurationError(f"handler name {name!r} does not match {IDENTIFIER_PATTERN}")
        names = tuple(dict.fromkeys(downstreams))
        for downstream in names:
            if _NAME.match(downstream) is None:
                raise ConfigurationError(
                    f"downstream name {downstream!r} of handler {name!r} does not match {IDENTIFIER_PATTERN}"
                )
        where = _runs_in(name, fn, runs_in)
        existing = self._handlers.get(name)
        if existing is not None and existing.fn is not fn:
            raise ConfigurationError(f"handler {name!r} is already registered to {existing.fn!r}")
        self._handlers[name] = Handler(name, fn, where)
        if names:
            self._downstreams[name] = names
        else:
            self._downstreams.pop(name, None)
        return fn

    def downstreams(self, name: str) -> tuple[str, ...]:
        """The downstreams the handler ``name`` declared (none for an unknown handler)."""
        return self._downstreams.get(name, ())

    def resolve(self, name: str) -> Handler:
        """The handler registered as ``name``, with where it runs.

        Raises:
            UnknownHandler: nothing is registered under ``name``.
        """
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownHandler(f"no handler is registered as {name!r}") from None

    def handlers(self) -> list[Handler]:
        return list(self._handlers.values())

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests; a claimer never unregisters)."""
        self._handlers.pop(name, None)
        self._downstreams.pop(name, None)

    def get(self, name: str) -> Callable[[RunContext], Any]:
        """The function registered as ``name`` (see `resolve` for where it runs).

        Raises:
            UnknownHandler: nothing is registered under ``name``.
        """
        return self.resolve(name).fn

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers


REGISTRY = HandlerRegistry()


def handler(
    name: str,
    *,
    downstreams: Iterable[str] = (),
    registry: HandlerRegistry = REGISTRY,
    runs_in: RunsIn | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler called ``name``.

    An `async def` runs on the claimer's loop, a plain `def` in its thread pool; pass
    ``runs_in="process"`` for a CPU-bound plain `def` (module-level, picklable arguments).

    >>> @handler("payouts.pay_merchants")
    ... async def pay(ctx: RunContext) -> dict[str, int]:
    ...     return {"paid": 1}
    """

    def decorate(fn: F) -> F:
        registry.register(name, fn, downstreams=downstreams, runs_in=runs_in)
        return fn

    return decorate


def load_handler_modules(modules: Iterable[str]) -> list[str]:
    """Import each dotted module path (their decorators register handlers); returns those imported.

    Raises:
        ConfigurationError: a module cannot be imported.
    """
    loaded = []
    for module in modules:
        path = module.strip()
        if not path:
            continue
        try:
            importlib.import_module(path)
        except ImportError as err:
            raise ConfigurationError(f"cannot import handler module {path!r}: {err}") from err
        loaded.append(path)
    return loaded
