"""The primitives workflow code calls: activities, timers, conditions, signals, recorded values.

Every function here must be called from workflow code (the `@workflow.run` method, a signal handler,
or a task they created) while the runtime steps it; elsewhere it raises `NotInWorkflow`. Each one
either hands back what the history recorded (on replay) or records a new decision.
"""

import asyncio
import copy
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NoReturn, TypeVar, overload
from uuid import UUID

from pydantic import PydanticUserError, TypeAdapter, ValidationError

from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.search import SearchAttribute, name_problem, search_attribute
from slotflow.contracts.timers import sleep_timer_id
from slotflow.contracts.workflows import (
    ActivityScheduled,
    DeadLetterPolicy,
    TimerCancelled,
    TimerStarted,
)
from slotflow.core.identity import activity_run_id
from slotflow.runs.context import RunContext
from slotflow.runs.registry import HandlerShape, handler_shape, input_adapter, problems
from slotflow.workflow._execution import Execution
from slotflow.workflow._loop import Condition
from slotflow.workflow._loop import current as running_execution
from slotflow.workflow.commands import CancelTimer, ScheduleActivity, StartTimer
from slotflow.workflow.definition import definition_of, to_json_object
from slotflow.workflow.errors import (
    ActivityInputError,
    ContinueAsNew,
    NotInWorkflow,
    QueryError,
    WorkflowError,
)

T = TypeVar("T")
InputT = TypeVar("InputT")


def current() -> Execution:
    """The execution whose code is running.

    Raises:
        NotInWorkflow: called outside workflow code.
    """
    execution = running_execution()
    if not isinstance(execution, Execution):
        raise NotInWorkflow(
            "slotflow.workflow primitives run only inside workflow code stepped by the runtime "
            "(a @workflow.run method, a signal handler, or a task they created)"
        )
    return execution


def _writable(what: str) -> Execution:
    """The execution whose code is running, unless it is answering a query (a query may only read).

    Raises:
        QueryError: called from a `@workflow.query` handler.
    """
    execution = current()
    if execution.read_only is not None:
        raise QueryError(f"a query handler may only read: {what} was called in query {execution.read_only!r}")
    return execution


@lru_cache(maxsize=256)
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def _load(kind: Any, value: Any) -> Any:
    return value if kind is None else _adapter(kind).validate_python(value)


def _seconds(duration: timedelta | float) -> timedelta:
    value = duration if isinstance(duration, timedelta) else timedelta(seconds=duration)
    if value < timedelta(0):
        raise ValueError(f"a durable timer needs a duration of zero or more, not {value}")
    return value


# -- activities ----------------------------------------------------------------------------------

_DEFAULT_POLICY = RetryPolicy()


def _policy(
    retry: RetryPolicy | None,
    start_to_close: timedelta | None,
    non_retryable: Iterable[str | type[BaseException]],
    heartbeat_timeout: timedelta | None = None,
) -> RetryPolicy:
    policy = retry or _DEFAULT_POLICY
    names = tuple(n if isinstance(n, str) else n.__name__ for n in non_retryable)
    if start_to_close is None and heartbeat_timeout is None and not names:
        return policy
    fields = policy.model_dump()
    if start_to_close is not None:
        fields["start_to_close"] = start_to_close
    if heartbeat_timeout is not None:
        fields["heartbeat_timeout"] = heartbeat_timeout
    fields["non_retryable"] = tuple(dict.fromkeys((*policy.non_retryable, *names)))
    return RetryPolicy(**fields)


def schedule(
    execution: Execution,
    activity: str,
    payload: dict[str, Any],
    policy: RetryPolicy,
    *,
    schedule_to_close: timedelta | None = None,
    compensates: int | None = None,
    on_dead_letter: DeadLetterPolicy = "fail",
) -> tuple[int, "asyncio.Future[Any]"]:
    """Match or record an ActivityScheduled; returns its sequence and the future of its outcome."""
    recorded = execution.match(ActivityScheduled, (activity, compensates))
    if recorded is not None:
        sequence = recorded.sequence
    else:
        sequence = execution.next_sequence
        deadline = execution.now + schedule_to_close if schedule_to_close is not None else None
        run_id = activity_run_id(execution.workflow_id, sequence)
        execution.record(
            ActivityScheduled,
            activity=activity,
            run_id=run_id,
            payload=payload,
            retry=policy,
            compensation=compensates is not None,
            compensates=compensates,
            schedule_to_close_deadline=deadline,
            on_dead_letter=on_dead_letter,
        )
        execution.commands.append(
            ScheduleActivity(
                workflow_id=execution.workflow_id,
                sequence=sequence,
                run_id=run_id,
                activity=activity,
                payload=payload,
                retry=policy,
                schedule_to_close_deadline=deadline,
                compensates=compensates,
                on_dead_letter=on_dead_letter,
            )
        )
    execution.activities[sequence] = activity
    return sequence, execution.future_for(sequence)


def activity_call(activity: object, arg: Any, what: str) -> tuple[str, dict[str, Any], HandlerShape | None]:
    """The activity's name, its payload, and its handler's shape when named by its function.

    ``activity`` is a handler name, or a `@handler` function: its registered name, and ``arg``
    checked against the input it declares (as the claimer will validate the payload), so a wrong
    argument fails at the call in the code, naming the activity and the type, and never a run.

    Raises:
        ActivityInputError: the function is not a registered handler, or ``arg`` does not fit its input.
        TypeError: ``arg`` does not serialise to a JSON object.
    """
    if isinstance(activity, str):
        return activity, to_json_object(arg, f"the argument of {what} {activity}"), None
    shape = handler_shape(activity)
    if shape is None or not shape.name:
        shown = getattr(activity, "__qualname__", None) or repr(activity)
        why = (
            "is registered under more than one name: pass the name"
            if shape is not None
            else "is not a registered handler: decorate it with @handler(name), or pass the activity's name"
        )
        raise ActivityInputError(f"{what} {shown} {why}")
    payload = to_json_object(arg, f"the argument of {what} {shape.name}")
    if shape.input is not None:
        try:
            input_adapter(shape.input).validate_python(payload)
        except ValidationError as err:
            expected = getattr(shape.input, "__qualname__", None) or repr(shape.input)
            raise ActivityInputError(
                f"{what} {shape.name} ({shape.qualname}) takes {expected}; the argument given does not "
                f"fit it: {problems(err)}"
            ) from None
    return shape.name, payload, shape


def _declared_result(shape: HandlerShape | None) -> Any:
    """The handler's return annotation when pydantic can validate it, else None (the JSON as is)."""
    if shape is None or shape.result is None or shape.result is Any:
        return None
    try:
        _adapter(shape.result)
    except PydanticUserError:  # its schema-generation error included
        return None
    return shape.result


@overload
async def execute_activity(
    activity: Callable[[RunContext, InputT], Awaitable[T]],
    arg: InputT,
    *,
    result_type: None = None,
    retry: RetryPolicy | None = None,
    start_to_close: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    schedule_to_close: timedelta | None = None,
    non_retryable: Iterable[str | type[BaseException]] = (),
    on_dead_letter: DeadLetterPolicy = "fail",
) -> T: ...
@overload
async def execute_activity(
    activity: Callable[[RunContext], Awaitable[T]],
    arg: Any = None,
    *,
    result_type: None = None,
    retry: RetryPolicy | None = None,
    start_to_close: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    schedule_to_close: timedelta | None = None,
    non_retryable: Iterable[str | type[BaseException]] = (),
    on_dead_letter: DeadLetterPolicy = "fail",
) -> T: ...
@overload
async def execute_activity(
    activity: str | Callable[..., Any],
    arg: Any = None,
    *,
    result_type: type[T],
    retry: RetryPolicy | None = None,
    start_to_close: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    schedule_to_close: timedelta | None = None,
    non_retryable: Iterable[str | type[BaseException]] = (),
    on_dead_letter: DeadLetterPolicy = "fail",
) -> T: ...
@overload
async def execute_activity(
    activity: str | Callable[..., Any],
    arg: Any = None,
    *,
    result_type: None = None,
    retry: RetryPolicy | None = None,
    start_to_close: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    schedule_to_close: timedelta | None = None,
    non_retryable: Iterable[str | type[BaseException]] = (),
    on_dead_letter: DeadLetterPolicy = "fail",
) -> Any: ...
async def execute_activity(
    activity: str | Callable[..., Any],
    arg: Any = None,
    *,
    result_type: Any = None,
    retry: RetryPolicy | None = None,
    start_to_close: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    schedule_to_close: timedelta | None = None,
    non_retryable: Iterable[str | type[BaseException]] = (),
    on_dead_letter: DeadLetterPolicy = "fail",
) -> Any:
    """Run the `@handler` ``activity`` with ``arg`` (a model or dict) and return its result.

    ``activity`` is the handler function itself (Temporal's style: the argument is checked against
    the input it declares here, `ActivityInputError` naming the activity and the type if it does
    not fit, and the result is validated into its return annotation), or its registered name (the
    argument sent as given; ``result_type`` types the result). ``result_type`` overrides the
    annotation.

    The claimers run it as run `{workflow_id}/{sequence}` with ``retry``; retried attempts are not
    history, so the code sees one result. ``start_to_close`` bounds one attempt,
    ``schedule_to_close`` all of them; ``non_retryable`` error types fail at once. With
    ``heartbeat_timeout`` an attempt must call `ctx.heartbeat` at least that often (from its start)
    or it fails with HeartbeatTimeout and is retried; the next attempt resumes from
    `ctx.heartbeat_details`. When the
    claimers give up (dead-lettered: a non-retryable error or out of attempts),
    ``on_dead_letter="fail"`` raises ActivityError here; ``"park"`` keeps waiting: the step is
    marked ActivityParked with the DLQ reason, and a redrive of the parked run brings its outcome.

    >>> auth = await workflow.execute_activity(
    ...     "payments.authorize", order, retry=RetryPolicy(max_attempts=5),
    ...     start_to_close=timedelta(seconds=30), non_retryable=["CardDeclined"])
    >>> charge = await workflow.execute_activity(charge_card, ChargeCard(amount=5))  # a Charge

    Raises:
        ActivityError: the activity failed permanently or ran out of attempts.
        ActivityTimeoutError: ``schedule_to_close`` passed first.
        ActivityInputError: ``arg`` does not fit the input of the handler ``activity``, or
            ``activity`` is a function no `@handler` registered.
    """
    execution = _writable("workflow.execute_activity")
    execution.check_cancel()
    name, payload, shape = activity_call(activity, arg, "activity")
    if result_type is None:
        result_type = _declared_result(shape)
    sequence, future = schedule(
        execution,
        name,
        payload,
        _policy(retry, start_to_close, non_retryable, heartbeat_timeout),
        schedule_to_close=schedule_to_close,
        on_dead_letter=on_dead_letter,
    )
    task = asyncio.current_task()
    # A forward step of the body's `async with Saga()` block: a cancel that arrives meanwhile waits
    # for its outcome (`Execution._cancel`), so an effect that happened gets its undo registered.
    saga_step = task is not None and task is execution.main and execution.saga_blocks.get(task, 0) > 0
    if saga_step:
        execution.saga_steps_in_flight += 1
    try:
        result = await future
    except asyncio.CancelledError:
        # The code no longer waits for it (its task was cancelled: a cancel request, or the code's
        # own `task.cancel()`): the activity's run is to be cancelled too.
        execution.activity_abandoned(sequence, name)
        raise
    finally:
        if saga_step:
            execution.saga_steps_in_flight -= 1
    if task is not None:
        execution.last_step[task] = sequence
    return _load(result_type, result)


# -- time ----------------------------------------------------------------------------------------


def start_timer(
    execution: Execution, duration: timedelta, *, signal: str | None = None
) -> tuple[int, "asyncio.Future[Any]"]:
    """Match or record a TimerStarted; ``signal`` names the signal it is the wait's timeout for."""
    recorded = execution.match(TimerStarted, None)
    if recorded is not None:
        sequence, timer_id = recorded.sequence, recorded.timer_id  # type: ignore[attr-defined]
    else:
        sequence = execution.next_sequence
        timer_id = sleep_timer_id(execution.workflow_id, sequence)
        fire_at = execution.now + duration
        execution.record(TimerStarted, timer_id=timer_id, fire_at=fire_at, signal=signal)
        execution.commands.append(StartTimer(execution.workflow_id, sequence, timer_id, fire_at))
    execution.timers[sequence] = timer_id
    return sequence, execution.future_for(sequence)


def cancel_timer(execution: Execution, sequence: int) -> None:
    """The code stopped waiting for the timer at ``sequence``: record it, so a late firing is ignored."""
    future = execution.futures[sequence]
    if (future.done() and not future.cancelled()) or sequence in execution.cancelled_timers:
        return
    execution.cancelled_timers.add(sequence)
    if execution.match(TimerCancelled, sequence) is None:
        timer_id = execution.timers[sequence]
        execution.record(TimerCancelled, started_sequence=sequence, timer_id=timer_id)
        execution.commands.append(CancelTimer(execution.workflow_id, timer_id, sequence))


async def sleep(duration: timedelta | float) -> None:
    """Wait ``duration`` (a timedelta or seconds) on a durable timer that survives any crash.

    >>> await workflow.sleep(timedelta(hours=24))
    """
    execution = _writable("workflow.sleep")
    execution.check_cancel()
    sequence, future = start_timer(execution, _seconds(duration))
    try:
        await future
    finally:
        if not future.done() or future.cancelled():
            cancel_timer(execution, sequence)


async def wait_condition(predicate: Callable[[], bool], *, timeout: timedelta | float | None = None) -> None:
    """Wait until ``predicate()`` is true (checked whenever the workflow's state may have changed).

    With ``timeout`` a durable timer bounds the wait; it is cancelled when the condition wins.

    >>> await workflow.wait_condition(lambda: self.approved, timeout=timedelta(days=7))

    Raises:
        TimeoutError: ``timeout`` passed first.
    """
    execution = _writable("workflow.wait_condition")
    execution.check_cancel()
    if predicate():
        return
    waiter: asyncio.Future[Any] = execution.loop.create_future()
    execution.loop.conditions.append(Condition(predicate, waiter))
    if timeout is None:
        await waiter
        return
    sequence, timer = start_timer(execution, _seconds(timeout))

    def expire(_: "asyncio.Future[Any]") -> None:
        if not waiter.done() and not timer.cancelled():
            waiter.set_exception(TimeoutError(f"condition not met within {timeout}"))

    timer.add_done_callback(expire)
    try:
        await waiter
    finally:
        if not timer.done() or timer.cancelled():
            cancel_timer(execution, sequence)


def now() -> datetime:
    """The current time as a recorded marker: the decision's time when first run, the same on replay.

    >>> deadline = workflow.now() + timedelta(days=3)
    """
    execution = current()
    if execution.read_only is not None:
        return execution.now  # a query records nothing: the time it is asked
    value = execution.marker("now", lambda _sequence: execution.now.isoformat())
    return datetime.fromisoformat(value)


def random() -> float:
    """A float in [0, 1), recorded once and replayed after (seeded by the run, not for secrets).

    >>> if workflow.random() < 0.1: ...
    """
    execution = _writable("workflow.random")
    return float(execution.marker("random", lambda sequence: execution.seeded(sequence).random()))


def uuid4() -> UUID:
    """A version-4 UUID, recorded once and replayed after (seeded by the run, not for secrets).

    >>> idempotency_key = str(workflow.uuid4())
    """
    execution = _writable("workflow.uuid4")
    return UUID(execution.marker("uuid", execution.uuid_at))


# -- signals -------------------------------------------------------------------------------------


async def wait_signal(
    name: str, *, timeout: timedelta | float | None = None, payload_type: Any = None
) -> Any:
    """The payload of the next signal ``name`` that has no `@workflow.signal` handler.

    Signals that arrived before the call are buffered, so none is lost whichever comes first.

    >>> address = await workflow.wait_signal("address_changed", payload_type=Address)

    Raises:
        TimeoutError: ``timeout`` passed before the signal.
        WorkflowError: the workflow has a handler for ``name`` (the handler receives it instead).
    """
    execution = _writable("workflow.wait_signal")
    execution.check_cancel()
    if name in execution.definition.signals:
        raise WorkflowError(
            f"signal {name!r} has a @workflow.signal handler, which receives it; "
            "wait with workflow.wait_condition() on what the handler sets"
        )
    buffered = execution.signal_buffers.get(name)
    if buffered:
        return _load(payload_type, buffered.popleft())
    waiter: asyncio.Future[Any] = execution.loop.create_future()
    waiters = execution.signal_waiters.setdefault(name, deque())
    waiters.append(waiter)
    if timeout is None:
        return _load(payload_type, await waiter)
    sequence, timer = start_timer(execution, _seconds(timeout), signal=name)

    def expire(_: "asyncio.Future[Any]") -> None:
        if not waiter.done() and not timer.cancelled():
            waiters.remove(waiter)
            waiter.set_exception(TimeoutError(f"no signal {name!r} within {timeout}"))

    timer.add_done_callback(expire)
    try:
        return _load(payload_type, await waiter)
    finally:
        if not timer.done() or timer.cancelled():
            cancel_timer(execution, sequence)


# -- tasks ---------------------------------------------------------------------------------------


def create_task(coro: Coroutine[Any, Any, T], *, name: str = "task") -> "asyncio.Task[T]":
    """Run ``coro`` concurrently on the workflow's own loop (an asyncio task; cancel() works).

    >>> charge = workflow.create_task(workflow.execute_activity("payments.charge", order))
    >>> ...
    >>> receipt = await charge
    """
    try:
        execution = _writable("workflow.create_task")
    except QueryError:
        coro.close()  # never started: closed here rather than warned about as never awaited
        raise
    return execution.loop.spawn(coro, name)


async def gather(*aws: Awaitable[Any]) -> list[Any]:
    """Run several coroutines (activities, timers, child workflows) at once; results in argument order.

    The first failure, in argument order, is raised once the ones before it finished; the others
    keep running (as with `asyncio.gather`, which workflow code does not use).

    >>> stock, price = await workflow.gather(workflow.execute_activity("stock.check", item),
    ...                                      workflow.execute_activity("prices.quote", item))
    """
    loop = _writable("workflow.gather").loop
    tasks = [loop.spawn(aw, "gather") if isinstance(aw, Coroutine) else aw for aw in aws]
    return [await task for task in tasks]


# -- versioning and run control ------------------------------------------------------------------


def patched(patch_id: str) -> bool:
    """True on the new code path: in new runs (recording a marker) and in histories that have it.

    >>> if workflow.patched("express-shipping"):
    ...     await workflow.execute_activity("shipping.book_express", order)
    ... else:
    ...     await workflow.execute_activity("shipping.book", order)
    """
    return _writable("workflow.patched").patched(patch_id, deprecated=False)


def deprecate_patch(patch_id: str) -> None:
    """Keep only the new path of ``patch_id`` while histories with its marker may still replay.

    Once no history older than this change is running, remove the call too: deprecated markers
    are skipped by code that no longer asks for them.

    >>> workflow.deprecate_patch("express-shipping")
    >>> await workflow.execute_activity("shipping.book_express", order)
    """
    _writable("workflow.deprecate_patch").patched(patch_id, deprecated=True)


def continue_as_new(input: Any = None, *, workflow: type[Any] | str | None = None) -> NoReturn:
    """End this run and start a fresh one of the same workflow id with ``input`` and an empty history.

    >>> if workflow.info().is_continue_as_new_suggested:
    ...     workflow.continue_as_new(State(cursor=self.cursor))
    """
    execution = _writable("workflow.continue_as_new")
    if workflow is None:
        name = execution.definition.name
    else:
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
    raise ContinueAsNew(name, to_json_object(input, "the continue_as_new input"))


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """What `workflow.info()` tells the code about its run."""

    workflow_id: str
    workflow_type: str
    #: `{workflow_id}#{sequence of this run's WorkflowStarted}`: a new one after continue-as-new.
    run_id: str
    #: Always 1: a workflow is not retried as a whole (its activities are); kept for Temporal users.
    attempt: int
    #: Events of this run the code has seen so far.
    history_length: int
    max_history_events: int
    #: True once the run is past the runtime's suggestion threshold: call `continue_as_new`.
    is_continue_as_new_suggested: bool
    continued_from: int | None
    parent_workflow_id: str | None
    #: True while the code re-runs recorded history (for logging only: never branch on it).
    is_replaying: bool
    #: The run's search attributes as plain values (a datetime for `datetime`), its start's and
    #: its upserts' so far (Temporal's `info().search_attributes`).
    search_attributes: dict[str, Any]


def info() -> WorkflowInfo:
    """The run's identity and history size.

    >>> log.info("step", extra={"workflow": workflow.info().workflow_id})
    """
    execution = current()
    started = execution.started
    length = execution.history_length()
    return WorkflowInfo(
        workflow_id=execution.workflow_id,
        workflow_type=execution.definition.name,
        run_id=f"{execution.workflow_id}#{started.sequence}",
        attempt=1,
        history_length=length,
        max_history_events=execution.max_history_events,
        is_continue_as_new_suggested=length >= execution.suggest_at,
        continued_from=started.continued_from,
        parent_workflow_id=started.parent_workflow_id,
        is_replaying=execution.replaying,
        search_attributes={name: a.value for name, a in execution.search_attributes.items()},
    )


def memo() -> dict[str, Any]:
    """The workflow's memo: the one it was started with (a continued run keeps its chain's), as
    `upsert_memo` calls left it; a copy.

    >>> channel = workflow.memo().get("channel", "web")
    """
    return copy.deepcopy(current().memo)


def upsert_memo(updates: Mapping[str, Any]) -> None:
    """Set (or, with None, remove) fields of this workflow's memo; the others keep theirs.

    Recorded in the history (`MemoUpserted`), so a replay must make the same call at the same
    point; the read model shows the new memo (`describe()`, `GET /v1/workflows/{id}`), never
    searches it. A continued run carries it on. Temporal's `workflow.upsert_memo`.

    >>> workflow.upsert_memo({"tracking": {"carrier": "dhl", "number": "JD0146"}})
    >>> workflow.upsert_memo({"note": None})     # removes it

    Raises:
        WorkflowError: no field named, a value that is not JSON, or a memo past its limit
            (`slotflow.contracts.search.MAX_MEMO_BYTES`); nothing is recorded.
    """
    execution = _writable("workflow.upsert_memo")
    execution.check_cancel()
    try:
        if not updates:
            raise ValueError("name at least one memo field")
        fields = {str(name): value for name, value in updates.items()}
        if any(not name or len(name) > 200 for name in fields):
            raise ValueError("a memo field's name takes 1 to 200 characters")
        execution.upsert_memo(fields)
    except ValueError as err:
        raise WorkflowError(f"upsert_memo: {err}") from None


def upsert_search_attributes(updates: Mapping[str, Any]) -> None:
    """Set (or, with None, remove) search attributes of this workflow; the others keep theirs.

    Recorded in the history (`SearchAttributesUpserted`), so a replay must make the same call at
    the same point; the read model indexes the new values for `list_workflows(query=...)`. Values
    are typed as at the start (str → keyword, int, float, bool, aware datetime, list of str →
    keyword_list, or `SearchAttribute(type="text", value=...)`).

    >>> workflow.upsert_search_attributes({"Stage": "shipped", "ShippedAt": workflow.now()})
    >>> workflow.upsert_search_attributes({"Coupon": None})     # removes it

    Raises:
        WorkflowError: a bad name or value, or the workflow's attributes would pass a limit
            (`slotflow.contracts.search`); nothing is recorded.
    """
    execution = _writable("workflow.upsert_search_attributes")
    execution.check_cancel()
    typed: dict[str, SearchAttribute | None] = {}
    try:
        if not updates:
            raise ValueError("name at least one search attribute")
        for name, value in updates.items():
            problem = name_problem(str(name))
            if problem is not None:
                raise ValueError(problem)
            try:
                typed[name] = None if value is None else search_attribute(value)
            except ValueError as err:
                raise ValueError(f"search attribute {name!r}: {err}") from None
        execution.upsert_search_attributes(typed)
    except ValueError as err:
        raise WorkflowError(f"upsert_search_attributes: {err}") from None
