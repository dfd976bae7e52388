"""Handlers by name: user code registers with `@handler("payouts.pay_merchants")`.

A claimer imports the modules named in its settings at start-up; importing a module runs its
decorators, which fill the registry. A JobDue names its handler; a name nobody registered is a
permanent failure (`UnknownHandler`), dead-lettered so that a redrive after a deploy completes it.

A handler takes the run's context, and may take the run's input as a second parameter, validated
from the payload into its annotation (`async def charge(ctx: RunContext, card: ChargeCard) ->
Receipt`): a payload that does not fit is a permanent failure (`HandlerInputError`), and workflow
code can pass the function itself to `workflow.execute_activity`, which checks its argument against
that type where it is called and types the result by the return annotation (`handler_shape`).

Where a handler runs: an `async def` on the claimer's event loop; a plain `def` in the claimer's
bounded thread pool, so a blocking call (`time.sleep`, a sync driver) cannot freeze the loop that
renews leases; with ``runs_in="process"`` a plain `def` runs in a process pool, for CPU-bound
work that would hold the GIL (it gets a context without pools: see `RunContext.detached`).
"""

import contextlib
import importlib
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticUserError

from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.errors import ConfigurationError, PermanentError
from slotflow.runs.context import RunContext

HandlerFn = Callable[[RunContext], Awaitable[Any]]
#: A handler: the run's context, and optionally its input (see the module docstring).
F = TypeVar("F", bound=Callable[..., Any])
RunsIn = Literal["loop", "thread", "process"]

_NAME = re.compile(IDENTIFIER_PATTERN)


class UnknownHandler(PermanentError):
    """No handler is registered under the run's handler name in this claimer."""

    reason: ClassVar[str] = "unknown_handler"


class HandlerInputError(PermanentError):
    """A run's payload does not fit the input its handler declares: the same payload would fail the
    same way on every attempt, so it is not retried."""


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler and where the claimer runs it."""

    name: str
    #: What the claimer calls with the run's context (for a handler that takes an input, a wrapper
    #: that validates the payload into it first).
    fn: Callable[[RunContext], Any]
    runs_in: RunsIn
    #: The function as written and registered; None when it is ``fn`` itself.
    source: Callable[..., Any] | None = None


#: The attribute `handler` and `HandlerRegistry.register` set on a function: its `HandlerShape`.
SHAPE_ATTRIBUTE = "__slotflow_handler__"


@dataclass(frozen=True)
class HandlerShape:
    """What a handler function declares: its registered name, the type of its input (its second
    parameter's annotation; `typing.Any` when it has none; None when it takes only the context)
    and of its result (its return annotation; None when it has none)."""

    name: str
    input: Any
    result: Any
    #: `module.qualname` of the function, for messages.
    qualname: str


def handler_shape(fn: object) -> HandlerShape | None:
    """The shape a `@handler` (or `HandlerRegistry.register`) left on ``fn``; None for any other."""
    shape = getattr(fn, SHAPE_ATTRIBUTE, None)
    return shape if isinstance(shape, HandlerShape) else None


def _shape_of(name: str, fn: Callable[..., Any]) -> HandlerShape:
    """Read ``fn``'s parameters and annotations: it takes an input when it requires exactly two
    positional parameters (the context, then the input); anything else is called with the context
    alone, as before handlers could take an input."""
    qualname = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: called with the context alone
        return HandlerShape(name, None, None, qualname)
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # an annotation that does not resolve here: checked at run time only
        hints = {}
    takes_input = len(positional) == 2
    input_type = hints.get(positional[1].name, Any) if takes_input else None
    result = hints.get("return")
    if typing.get_origin(result) in (Awaitable, typing.Awaitable, typing.Coroutine):
        result = None  # a plain def handing back an awaitable: its result is not declared here
    return HandlerShape(name, input_type, result, qualname)


@lru_cache(maxsize=512)
def input_adapter(kind: Any) -> TypeAdapter[Any]:
    """A validator of a handler's input type, built once per type.

    Raises:
        ConfigurationError: the type is not one pydantic can validate.
    """
    try:
        return TypeAdapter(kind)
    except PydanticUserError as err:
        raise ConfigurationError(f"{kind!r} is not a type pydantic can validate: {err}") from None


def load_input(shape: HandlerShape, payload: Any) -> Any:
    """``payload`` validated into ``shape``'s input type.

    Raises:
        HandlerInputError: it does not fit.
    """
    try:
        return input_adapter(shape.input).validate_python(payload)
    except ValidationError as err:
        raise HandlerInputError(
            f"the input of handler {shape.name!r} does not fit {_type_name(shape.input)}: {problems(err)}"
        ) from None


def _type_name(kind: Any) -> str:
    return getattr(kind, "__qualname__", None) or repr(kind)


def problems(err: ValidationError, *, named: int = 5) -> str:
    """A validation error's first ``named`` problems, `field: message; ...` (the rest counted)."""
    listed = [
        f"{'.'.join(str(part) for part in error['loc']) or '(the value)'}: {error['msg']}"
        for error in err.errors()[:named]
    ]
    more = err.error_count() - len(listed)
    return "; ".join(listed) + (f"; and {more} more" if more > 0 else "")


class _WithInput:
    """A handler that takes an input, as the claimer calls it: with the context alone.

    Module-level and holding only the function and its shape, so it pickles for a process pool
    (by the function's qualified name, as a plain handler does). ``__wrapped__`` is the function,
    for `inspect.unwrap` (the claimer's watchdog names the code it finds there).
    """

    def __init__(self, fn: Callable[..., Any], shape: HandlerShape) -> None:
        self.__wrapped__ = fn
        self.shape = shape

    def __call__(self, ctx: RunContext) -> Any:
        return self.__wrapped__(ctx, load_input(self.shape, ctx.payload))


class _AsyncWithInput(_WithInput):
    """`_WithInput` for an `async def`: the claimer awaits it on its loop."""

    async def __call__(self, ctx: RunContext) -> Any:
        return await self.__wrapped__(ctx, load_input(self.shape, ctx.payload))


def run_callable(name: str, fn: Callable[..., Any]) -> Callable[[RunContext], Any]:
    """``fn``, the handler ``name``, as called with the context alone: itself when it takes only
    the context, else a wrapper that validates the payload into its input first.

    Raises:
        ConfigurationError: its input type is not one pydantic can validate.
    """
    shape = _shape_of(name, fn)
    if shape.input is None:
        return fn
    input_adapter(shape.input)  # a type pydantic cannot validate fails here, at registration
    return _AsyncWithInput(fn, shape) if is_async_handler(fn) else _WithInput(fn, shape)


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
        if existing is not None and (existing.source or existing.fn) is not fn:
            raise ConfigurationError(
                f"handler {name!r} is already registered to {existing.source or existing.fn!r}"
            )
        call = run_callable(name, fn)
        _mark(fn, _shape_of(name, fn))
        self._handlers[name] = Handler(name, call, where, source=fn if call is not fn else None)
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


def _mark(fn: Callable[..., Any], shape: HandlerShape) -> None:
    """Leave ``shape`` on ``fn`` for `handler_shape` (workflow code names the activity by it)."""
    existing = handler_shape(fn)
    if existing is not None and existing.name != shape.name:
        # One function under two names: it names neither when passed to execute_activity.
        shape = HandlerShape("", shape.input, shape.result, shape.qualname)
    # A bound method or a builtin takes no attribute: it is reachable by its name only.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(fn, SHAPE_ATTRIBUTE, shape)


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
