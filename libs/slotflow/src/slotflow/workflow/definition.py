"""`@workflow.defn`, `@workflow.run`, `@workflow.signal` and `@workflow.query`: how a class becomes
a workflow.

A workflow is a class with one `@workflow.run` coroutine method (its body is the workflow), any
number of `@workflow.signal` methods (called when a signal of that name is delivered) and of
`@workflow.query` methods (plain methods that read its state when asked). The class is
instantiated once per run with no arguments; `run` takes zero or one argument, the start input.

Inputs, signal payloads and results cross the history as JSON: a parameter annotated with a
pydantic model (or any type pydantic understands) is validated from the recorded JSON, and a
returned model is dumped to JSON, so typed code and the wire stay in step.
"""

import inspect
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints, overload

import pydantic_core
from pydantic import TypeAdapter, ValidationError

from slotflow.contracts.acceptance import check_value
from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.workflow.errors import WorkflowDefinitionError

T = TypeVar("T")
C = TypeVar("C", bound=type[Any])
F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])
#: A signal handler may be a plain method too (the runtime calls either), so its bound is wider.
S = TypeVar("S", bound=Callable[..., Any])
Q = TypeVar("Q", bound=Callable[..., Any])

_RUN_MARK = "__slotflow_workflow_run__"
#: On a `@workflow.run` method: the definitions of the `@workflow.defn` classes whose body it is, so
#: the method alone names its workflow (`client.start_workflow(Checkout.run, ...)`).
_RUN_OF = "__slotflow_workflow_run_of__"
_SIGNAL_MARK = "__slotflow_workflow_signal__"
_QUERY_MARK = "__slotflow_workflow_query__"
_DEFINITION = "__slotflow_workflow__"


class Converter:
    """JSON to a typed value and back, for one annotation (`Any` passes values through)."""

    __slots__ = ("_adapter",)

    def __init__(self, annotation: Any) -> None:
        self._adapter: TypeAdapter[Any] | None = (
            None if annotation in (Any, inspect.Parameter.empty) else (TypeAdapter(annotation))
        )

    def load(self, value: Any) -> Any:
        return value if self._adapter is None else self._adapter.validate_python(value)

    def dump(self, value: Any) -> Any:
        return to_json(value) if self._adapter is None else self._adapter.dump_python(value, mode="json")


def to_json(value: Any) -> Any:
    """A JSON-ready form of ``value`` (pydantic models and dataclasses dumped, the rest as given)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return pydantic_core.to_jsonable_python(value)


def to_json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a JSON object (history payload fields are objects); None is ``{}``."""
    if value is None:
        return {}
    dumped = to_json(value)
    if not isinstance(dumped, dict):
        raise TypeError(
            f"{what} must serialise to a JSON object (a dict or a model), not {type(value).__name__}"
        )
    # What the acceptance rule refuses (nested too deep, a NUL, NaN) would be refused in the
    # history event and the JobDue or command carrying it: the workflow would wait for an activity
    # (or a child) that never starts. Refused here, at the call in the code, naming what.
    check_value(dumped, what)
    return dumped


#: At most this many of a payload's validation errors are named in a refusal (the rest counted).
_ERRORS_NAMED = 5


@dataclass(frozen=True, slots=True)
class SignalDefinition:
    name: str
    method: Callable[..., Any]
    payload: Converter | None  # None: the handler takes no argument

    def refusal(self, payload: dict[str, Any]) -> str | None:
        """Why ``payload`` cannot be this handler's argument, or None when it decodes (a handler
        without an argument, or typed `Any`, takes any payload).

        The orchestrator asks before a SignalWorkflow reaches the run: a payload that does not fit
        the declared type is rejected with this reason instead of failing the workflow.
        """
        if self.payload is None:
            return None
        try:
            self.payload.load(payload)
        except ValidationError as err:
            problems = [
                f"{'.'.join(str(part) for part in error['loc']) or '(the payload)'}: {error['msg']}"
                for error in err.errors()[:_ERRORS_NAMED]
            ]
            more = err.error_count() - len(problems)
            listed = "; ".join(problems) + (f"; and {more} more" if more > 0 else "")
            return f"the payload does not fit {self._parameter()}: {listed}"
        except Exception as err:  # noqa: BLE001 - a validator of the user's raising anything else
            return f"the payload does not fit {self._parameter()}: {type(err).__name__}: {err}"
        return None

    def _parameter(self) -> str:
        return f"the parameter of handler {self.method.__qualname__}"


@dataclass(frozen=True, slots=True)
class QueryDefinition:
    name: str
    method: Callable[..., Any]
    arg: Converter | None  # None: the handler takes no argument
    result: Converter


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """What the runtime knows about a workflow class."""

    name: str
    cls: type[Any]
    run: Callable[..., Coroutine[Any, Any, Any]]
    #: None when `run` takes no input.
    input: Converter | None
    result: Converter
    signals: dict[str, SignalDefinition] = field(default_factory=dict)
    queries: dict[str, QueryDefinition] = field(default_factory=dict)


@overload
def defn(cls: C, /) -> C: ...
@overload
def defn(*, name: str | None = None) -> Callable[[C], C]: ...
def defn(cls: C | None = None, /, *, name: str | None = None) -> C | Callable[[C], C]:
    """Make a class a workflow named ``name`` (default: the class name).

    >>> @workflow.defn(name="orders.checkout")
    ... class Checkout:
    ...     @workflow.run
    ...     async def run(self, order: Order) -> Receipt: ...

    Raises:
        WorkflowDefinitionError: no or several `@workflow.run` methods, a bad name or signature.
    """

    def decorate(target: C) -> C:
        definition = _build(target, name or target.__name__)
        setattr(target, _DEFINITION, definition)
        # A run method inherited by a second workflow class is the body of both: kept as a tuple,
        # so naming the workflow by that method alone is refused as ambiguous, never guessed.
        setattr(definition.run, _RUN_OF, (*getattr(definition.run, _RUN_OF, ()), definition))
        return target

    return decorate if cls is None else decorate(cls)


def run(fn: F) -> F:
    """Mark the workflow's body: ``async def run(self[, input])``; its return is the result."""
    if not inspect.iscoroutinefunction(fn):
        raise WorkflowDefinitionError(f"@workflow.run {fn.__qualname__} must be an async def")
    setattr(fn, _RUN_MARK, True)
    return fn


@overload
def signal(fn: S, /) -> S: ...
@overload
def signal(*, name: str | None = None) -> Callable[[S], S]: ...
def signal(fn: S | None = None, /, *, name: str | None = None) -> S | Callable[[S], S]:
    """Mark a signal handler (sync or async), called with the payload when the signal arrives.

    >>> @workflow.signal
    ... async def address_changed(self, address: Address) -> None:
    ...     self.address = address
    """

    def decorate(target: S) -> S:
        setattr(target, _SIGNAL_MARK, name or target.__name__)
        return target

    return decorate if fn is None else decorate(fn)


@overload
def query(fn: Q, /) -> Q: ...
@overload
def query(*, name: str | None = None) -> Callable[[Q], Q]: ...
def query(fn: Q | None = None, /, *, name: str | None = None) -> Q | Callable[[Q], Q]:
    """Mark a query handler: a plain method that reads the workflow's state and returns it, asked
    by name with at most one argument. It runs on the state the workflow's last decision left and
    may only read: an activity, a timer, a child, `workflow.random()`, an upsert or any other call
    that would record something raises `QueryError`, and nothing is appended to the history.

    >>> @workflow.query
    ... def status(self) -> OrderStatus:
    ...     return OrderStatus(stage=self.stage, lines=len(self.lines))

    Raises:
        WorkflowDefinitionError: the handler is an `async def` (a query awaits nothing).
    """

    def decorate(target: Q) -> Q:
        if inspect.iscoroutinefunction(target):
            raise WorkflowDefinitionError(
                f"@workflow.query {target.__qualname__} must be a plain def: a query only reads, "
                "and reading needs no await"
            )
        setattr(target, _QUERY_MARK, name or target.__name__)
        return target

    return decorate if fn is None else decorate(fn)


def definition_of(cls: type[Any]) -> WorkflowDefinition:
    """The definition `@workflow.defn` attached to ``cls``.

    Raises:
        WorkflowDefinitionError: ``cls`` is not decorated with `@workflow.defn`.
    """
    found = cls.__dict__.get(_DEFINITION)
    if not isinstance(found, WorkflowDefinition):
        raise WorkflowDefinitionError(
            f"{cls.__qualname__} is not a workflow: decorate it with @workflow.defn"
        )
    return found


def definition_of_run(method: Callable[..., Any]) -> WorkflowDefinition:
    """The definition of the workflow whose `@workflow.run` method ``method`` is (taken from the
    class, ``Checkout.run``, or bound to an instance).

    >>> definition_of_run(Checkout.run).name
    'orders.checkout'

    Raises:
        WorkflowDefinitionError: ``method`` is not a `@workflow.run` method, its class is not
            decorated with `@workflow.defn`, or it is the run method of several workflow classes
            (a base class's inherited by a subclass): then pass the class.
    """
    function = getattr(method, "__func__", method)
    name = getattr(function, "__qualname__", repr(function))
    if not getattr(function, _RUN_MARK, False):
        raise WorkflowDefinitionError(
            f"{name} is not a workflow's run method: pass a @workflow.defn class, its @workflow.run "
            "method or the workflow type name"
        )
    owners: tuple[WorkflowDefinition, ...] = getattr(function, _RUN_OF, ())
    if not owners:
        raise WorkflowDefinitionError(
            f"{name} is marked @workflow.run, but its class is not a workflow: decorate it with @workflow.defn"
        )
    if len({owner.name for owner in owners}) > 1:
        names = ", ".join(sorted({repr(owner.name) for owner in owners}))
        raise WorkflowDefinitionError(
            f"{name} is the run method of several workflows ({names}): pass the class or its type name"
        )
    return owners[-1]


def _build(cls: type[Any], name: str) -> WorkflowDefinition:
    if re.match(IDENTIFIER_PATTERN, name) is None:
        raise WorkflowDefinitionError(f"workflow name {name!r} does not match {IDENTIFIER_PATTERN}")
    runs = [m for m in _methods(cls) if getattr(m, _RUN_MARK, False)]
    if len(runs) != 1:
        raise WorkflowDefinitionError(
            f"workflow {cls.__qualname__} needs exactly one @workflow.run method, found {len(runs)}"
        )
    body = runs[0]
    params, hints = _parameters(body)
    if len(params) > 1:
        raise WorkflowDefinitionError(f"{body.__qualname__} takes at most one argument, the start input")
    signals = {
        handler_name: SignalDefinition(handler_name, method, arg)
        for handler_name, method, arg, _ in _handlers(cls, name, _SIGNAL_MARK, "signal")
    }
    queries = {
        handler_name: QueryDefinition(handler_name, method, arg, result)
        for handler_name, method, arg, result in _handlers(cls, name, _QUERY_MARK, "query")
    }
    return WorkflowDefinition(
        name=name,
        cls=cls,
        run=body,
        input=Converter(hints.get(params[0].name, Any)) if params else None,
        result=Converter(hints.get("return", Any)),
        signals=signals,
        queries=queries,
    )


def _handlers(
    cls: type[Any], workflow: str, mark: str, kind: str
) -> list[tuple[str, Callable[..., Any], Converter | None, Converter]]:
    """The methods of ``cls`` marked ``mark`` (signal or query handlers): each one's name, its
    argument's converter (None: it takes none) and its result's.

    Raises:
        WorkflowDefinitionError: a bad name, two handlers of one name, more than one argument.
    """
    found: list[tuple[str, Callable[..., Any], Converter | None, Converter]] = []
    for method in _methods(cls):
        handler_name = getattr(method, mark, None)
        if handler_name is None:
            continue
        if re.match(IDENTIFIER_PATTERN, handler_name) is None:
            raise WorkflowDefinitionError(f"{kind} name {handler_name!r} does not match {IDENTIFIER_PATTERN}")
        if any(handler_name == taken for taken, _, _, _ in found):
            raise WorkflowDefinitionError(f"workflow {workflow} has two handlers for {kind} {handler_name!r}")
        params, hints = _parameters(method)
        if len(params) > 1:
            raise WorkflowDefinitionError(f"{kind} handler {method.__qualname__} takes at most one argument")
        arg = Converter(hints.get(params[0].name, Any)) if params else None
        found.append((handler_name, method, arg, Converter(hints.get("return", Any))))
    return found


def _methods(cls: type[Any]) -> list[Callable[..., Any]]:
    seen: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            if callable(value):
                seen[attr] = value
    return list(seen.values())


def _parameters(fn: Callable[..., Any]) -> tuple[list[inspect.Parameter], dict[str, Any]]:
    params = list(inspect.signature(fn).parameters.values())[1:]  # without self
    try:
        hints = get_type_hints(fn)
    except (NameError, TypeError) as err:
        raise WorkflowDefinitionError(f"cannot resolve the annotations of {fn.__qualname__}: {err}") from err
    return params, hints
