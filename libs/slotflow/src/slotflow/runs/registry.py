"""Handlers by name: user code registers with `@handler("payouts.pay_merchants")`.

A claimer imports the modules named in its settings at start-up; importing a module runs its
decorators, which fill the registry. A JobDue names its handler; a name nobody registered is a
permanent failure (`UnknownHandler`), dead-lettered so that a redrive after a deploy completes it.
"""

import importlib
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, ClassVar, TypeVar

from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.errors import ConfigurationError, PermanentError
from slotflow.runs.context import RunContext

HandlerFn = Callable[[RunContext], Awaitable[Any]]
F = TypeVar("F", bound=HandlerFn)

_NAME = re.compile(IDENTIFIER_PATTERN)


class UnknownHandler(PermanentError):
    """No handler is registered under the run's handler name in this claimer."""

    reason: ClassVar[str] = "unknown_handler"


class HandlerRegistry:
    """Handler functions by name; one per process is usual (`REGISTRY`)."""

    def __init__(self) -> None:
        self._handlers: dict[str, HandlerFn] = {}
        self._downstreams: dict[str, tuple[str, ...]] = {}

    def register(self, name: str, fn: HandlerFn, *, downstreams: Iterable[str] = ()) -> HandlerFn:
        """Register ``fn`` under ``name``; a second, different function under one name is an error.

        ``downstreams`` names the dependencies ``fn`` calls: each gets a retry budget and a circuit
        breaker shared by every claimer (docs/claimer.md, "Retry budgets and circuit breakers").
        """
        if _NAME.match(name) is None:
            raise ConfigurationError(f"handler name {name!r} does not match {IDENTIFIER_PATTERN}")
        names = tuple(dict.fromkeys(downstreams))
        for downstream in names:
            if _NAME.match(downstream) is None:
                raise ConfigurationError(
                    f"downstream name {downstream!r} of handler {name!r} does not match {IDENTIFIER_PATTERN}"
                )
        existing = self._handlers.get(name)
        if existing is not None and existing is not fn:
            raise ConfigurationError(f"handler {name!r} is already registered to {existing!r}")
        self._handlers[name] = fn
        if names:
            self._downstreams[name] = names
        else:
            self._downstreams.pop(name, None)
        return fn

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests; a claimer never unregisters)."""
        self._handlers.pop(name, None)
        self._downstreams.pop(name, None)

    def downstreams(self, name: str) -> tuple[str, ...]:
        """The downstreams the handler ``name`` declared (none for an unknown handler)."""
        return self._downstreams.get(name, ())

    def get(self, name: str) -> HandlerFn:
        """The handler registered as ``name``.

        Raises:
            UnknownHandler: nothing is registered under ``name``.
        """
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownHandler(f"no handler is registered as {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers


REGISTRY = HandlerRegistry()


def handler(
    name: str, *, downstreams: Iterable[str] = (), registry: HandlerRegistry = REGISTRY
) -> Callable[[F], F]:
    """Register the decorated async function as the handler called ``name``.

    >>> @handler("payouts.pay_merchants")
    ... async def pay(ctx: RunContext) -> dict[str, int]:
    ...     return {"paid": 1}
    """

    def decorate(fn: F) -> F:
        registry.register(name, fn, downstreams=downstreams)
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
