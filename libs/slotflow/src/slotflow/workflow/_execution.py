"""One run of one workflow, replayed from its history and advanced past it: the matching rules.

History events are *inputs* (what the world did: WorkflowStarted, results, timer firings, signals,
cancel requests) or *decisions* (what the code did: ActivityScheduled, TimerStarted, markers, ...).
Inputs are delivered to the code one at a time, in history order, and the loop runs until it is
quiescent after each; so how the caller batched its `replay` calls can never change what the code
sees. A *group* is a run of consecutive inputs; the decisions the code makes while any input of a
group is delivered must be the decisions recorded between that group and the next one, in order:

- the next recorded decision matches (same kind, same activity name, ...): the code gets the
  recorded values (a marker's value, a timer's fire time, the run id) and nothing is sent again;
- it differs, or the group's decisions are used up while more inputs follow: `NonDeterminismError`;
- the last group's decisions are used up: the decision is new and gets the next sequence.

Before an input is delivered every decision recorded before it must have been made, and at the end
every recorded decision must have been made ("the code no longer sleeps here" is caught too).
Deprecated patch markers the code no longer asks for are skipped.
"""

import asyncio
import contextlib
import copy
import inspect
import random as _random
import uuid as _uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from hashlib import sha256
from typing import Any, ClassVar

from slotflow.contracts.acceptance import check_value
from slotflow.contracts.search import SearchAttribute, check_memo, check_search_attributes, merged
from slotflow.contracts.workflows import (
    ActivityCompleted,
    ActivityFailed,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    HistoryEvent,
    MarkerRecorded,
    MemoUpserted,
    SearchAttributesUpserted,
    SignalReceived,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.core.identity import activity_run_id
from slotflow.core.nul import storable
from slotflow.workflow._closing import closing_commands
from slotflow.workflow._events import (
    DECISION,
    INPUT,
    KIND,
    SCHEDULE_TO_CLOSE_TIMEOUT,
    decision_key,
    describe_decision,
    describe_event,
    forced_end,
    memo_key,
    upsert_key,
)
from slotflow.workflow._loop import Loop, enter, leave
from slotflow.workflow._loop import current as running_execution
from slotflow.workflow.commands import CancelActivity, Command
from slotflow.workflow.definition import QueryDefinition, WorkflowDefinition
from slotflow.workflow.errors import (
    ActivityError,
    ActivityTimeoutError,
    ChildWorkflowError,
    ContinueAsNew,
    InvalidHistory,
    NonDeterminismError,
    QueryError,
    WorkflowDeterminismError,
)

#: The patch marker (`workflow.patched`) a run records when a signal handler's exception cancels
#: its body, so the body compensates before the run fails. Histories recorded before that rule have
#: no marker there and replay the old one: the run failed at once, its compensations unrun.
SIGNAL_FAILURE_COMPENSATES = "slotflow:signal-handler-failure-cancels-the-body"


#: The patch marker a run records when a cancel request arrives while its body awaits a forward step
#: of an `async with Saga()` block: the cancel waits for that step's outcome, so its undo is
#: registered (and run) before the cancel is raised. Histories recorded before have no marker there
#: and replay the old way: the cancel was raised at once, the step's late result dropped.
CANCEL_AWAITS_SAGA_STEP = "slotflow:cancel-awaits-the-saga-step-in-flight"


class _RunEnded(Exception):
    """The history ends the run where the code went on (the runtime's own ceiling failure)."""


class Execution:
    """A workflow run's state while its history is replayed and the code advanced past it."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        history: Sequence[HistoryEvent],
        start: int,
        *,
        now: datetime,
        max_history_events: int,
        suggest_continue_as_new_at: int,
    ) -> None:
        started = history[start]
        assert isinstance(started, WorkflowStarted)  # noqa: S101 - the runtime found it
        self.definition = definition
        self.started = started
        self.workflow_id = started.workflow_id
        self.start = start
        self.history = history
        self.now = now
        self.max_history_events = max_history_events
        self.suggest_at = suggest_continue_as_new_at
        self.loop = Loop()  # type: ignore[abstract]
        self.main: asyncio.Task[Any] | None = None
        self.instance: Any = None
        #: Results the code waits for, by the sequence of the decision that asked for them.
        self.futures: dict[int, asyncio.Future[Any]] = {}
        self.activities: dict[int, str] = {}
        self.timers: dict[int, str] = {}
        self.cancelled_timers: set[int] = set()
        self.children: dict[int, tuple[str, str]] = {}
        self.signal_buffers: dict[str, deque[dict[str, Any]]] = {}
        self.signal_waiters: dict[str, deque[asyncio.Future[Any]]] = {}
        #: Sequence of the last activity result each task received (for saga compensations).
        self.last_step: dict[asyncio.Task[Any], int] = {}
        self.patches: dict[str, bool] = {}
        self.position = start  # next history index to deliver
        self.dcursor = self._next_decision(start + 1)
        self.group_limit = -1  # inputs before this index share the open window
        self.window_end = -1
        self.delivering = started.sequence
        self.emitted_since = 0
        self.new_events: list[HistoryEvent] = []
        self.commands: list[Command] = []
        self.closed: HistoryEvent | None = None
        self.violation: NonDeterminismError | None = None
        self.handler_failure: BaseException | None = None
        #: True once a handler's failure cancelled the body: the run fails with it when the body ends.
        self.failing_from_handler = False
        self.cancel_reason: str | None = None
        self.cancel_pending = False
        self.shield = 0
        #: `async with Saga()` blocks open, per task (`saga.Saga.__aenter__`).
        self.saga_blocks: dict[asyncio.Task[Any], int] = {}
        #: Forward steps the body awaits inside a Saga block right now: a cancel waits for them.
        self.saga_steps_in_flight = 0
        self.compensations_ran = False
        self.compensations_ok = True
        self.disposing = False
        #: The query being answered, while its handler runs: every primitive that would record
        #: something raises `QueryError` (`_api._writable`).
        self.read_only: str | None = None
        #: Activities the code stopped waiting on in the part of the history it replayed.
        self.abandoned_in_replay: set[int] = set()
        #: The run's memo: its start's, then each upsert the code made so far.
        self.memo: dict[str, Any] = copy.deepcopy(started.memo)
        #: The run's search attributes: its start's, then each upsert the code made so far.
        self.search_attributes: dict[str, SearchAttribute] = dict(started.search_attributes)

    # -- driving -------------------------------------------------------------------------------

    def advance(self, history: Sequence[HistoryEvent], now: datetime) -> None:
        """Deliver every input from `position` on (``history`` extends the one already seen)."""
        self.history, self.now = history, now
        self.new_events, self.commands = [], []
        n = len(history)
        previous = enter(self)
        try:
            index = self.position
            while index < n and self.closed is None:
                event = history[index]
                kind = KIND.get(type(event))
                if kind is None:
                    raise InvalidHistory(f"{self.workflow_id}: unknown history event {type(event).__name__}")
                if kind == INPUT:
                    if self.dcursor < index:
                        self._made_everything_before(index)
                    if index >= self.group_limit:
                        self._open_window(index)
                    self.delivering, self.emitted_since = event.sequence, 0
                    self._deliver(event)
                    self._settle()
                index += 1
            self.position = index
            if self.closed is None:
                self._made_everything_before(n)
        except _RunEnded:
            self.position = n
        finally:
            leave(previous)

    def dispose(self) -> None:
        """Close the code's coroutines without letting their cleanup make decisions."""
        self.disposing = True
        previous = enter(self)
        try:
            for task in self.loop.tasks:
                if not task.done():
                    # Cleanup that insists on awaiting cannot make decisions now; let it go.
                    with contextlib.suppress(Exception):
                        task.get_coro().close()
        finally:
            self.loop.disposed = True
            leave(previous)

    def refuse(self, used: str, instead: str) -> BaseException:
        """The guard's error for ``used``; remembered so `replay` raises it even if the code catches it."""
        return self._violated(WorkflowDeterminismError(self.workflow_id, self.delivering, used, instead))

    def _violated(self, error: NonDeterminismError) -> NonDeterminismError:
        if self.violation is None:
            self.violation = error
        return error

    def _settle(self) -> None:
        self.loop.run()
        if self.violation is not None:
            raise self.violation
        if self.loop.errors:
            raise self.loop.errors[0]
        main = self.main
        if main is not None and main.done() and self.closed is None:
            self._finish(main)
        elif self.failing_from_handler:
            return  # the body, cancelled, compensates first; `_finish` fails the run once it ends
        elif self.handler_failure is not None and self.closed is None:
            self._finish_with_error(self.handler_failure)
        elif self.loop.exits and self.closed is None:
            self._finish_with_error(self.loop.exits[0])

    # -- the two cursors -----------------------------------------------------------------------

    def _next_decision(self, index: int) -> int:
        history, n = self.history, len(self.history)
        while index < n and KIND.get(type(history[index])) != DECISION:
            index += 1
        return index

    def _open_window(self, index: int) -> None:
        history, n = self.history, len(self.history)
        k = index + 1
        while k < n and KIND.get(type(history[k])) != DECISION:
            k += 1
        self.group_limit = k
        while k < n and KIND.get(type(history[k])) != INPUT:
            k += 1
        self.window_end = k

    def _skippable(self, event: HistoryEvent) -> bool:
        return type(event) is MarkerRecorded and event.kind == "patch" and event.deprecated

    def _made_everything_before(self, index: int) -> None:
        history = self.history
        while self.dcursor < index:
            recorded = history[self.dcursor]
            if self._skippable(recorded):
                self.dcursor = self._next_decision(self.dcursor + 1)
                continue
            if forced_end(recorded):
                raise _RunEnded
            waiting = "the code is waiting" if self.closed is None else "the run had ended"
            raise NonDeterminismError(
                self.workflow_id,
                recorded.sequence,
                describe_event(recorded),
                f"nothing ({waiting})",
                hint="Was a step removed? Guard changes with workflow.patched().",
            )

    def match(self, kind: type[HistoryEvent], key: Any) -> HistoryEvent | None:
        """The recorded decision the code's ``kind``/``key`` decision replays, or None when new."""
        if self.disposing or running_execution() is not self:
            # Cleanup code run by a coroutine's close (a discarded or garbage-collected execution):
            # it cannot make decisions any more.
            raise GeneratorExit
        self.emitted_since += 1
        history = self.history
        while self.dcursor < self.window_end:
            recorded = history[self.dcursor]
            if type(recorded) is kind and decision_key(recorded) == key:
                self.dcursor = self._next_decision(self.dcursor + 1)
                return recorded
            if self._skippable(recorded):
                self.dcursor = self._next_decision(self.dcursor + 1)
                continue
            if forced_end(recorded):
                raise _RunEnded
            raise self._violated(
                NonDeterminismError(
                    self.workflow_id,
                    recorded.sequence,
                    describe_event(recorded),
                    describe_decision(kind, key),
                )
            )
        if self.window_end < len(history):
            following = history[self.window_end]
            raise self._violated(
                NonDeterminismError(
                    self.workflow_id,
                    following.sequence,
                    f"no further decision before {describe_event(following)}",
                    describe_decision(kind, key),
                    hint="Was a step added? Guard changes with workflow.patched().",
                )
            )
        return None

    def patched(self, patch_id: str, *, deprecated: bool) -> bool:
        """`workflow.patched` / `deprecate_patch`: whether the code takes the new path here."""
        if patch_id in self.patches:
            return self.patches[patch_id]
        if self.disposing or running_execution() is not self:
            raise GeneratorExit
        history = self.history
        cursor = self.dcursor
        while cursor < self.window_end:
            recorded = history[cursor]
            if (
                type(recorded) is MarkerRecorded
                and recorded.kind == "patch"
                and recorded.patch_id == patch_id
            ):
                self.dcursor = self._next_decision(cursor + 1)
                self.emitted_since += 1
                self.patches[patch_id] = True
                return True
            if not self._skippable(recorded):
                break
            cursor = self._next_decision(cursor + 1)
        if cursor < self.window_end or self.window_end < len(history):
            # Recorded before the patch existed: the old path (a deprecated patch has no old path).
            self.patches[patch_id] = deprecated
            return deprecated
        self.emitted_since += 1
        self.record(MarkerRecorded, kind="patch", patch_id=patch_id, deprecated=deprecated)
        self.patches[patch_id] = True
        return True

    def activity_abandoned(self, sequence: int, activity: str) -> None:
        """The code stopped waiting for the activity at ``sequence`` before its outcome was
        delivered: a CancelActivity command asks for its run to be cancelled. Sent once, by the
        decision in which it happened (not again on replay: a replay only notes it, in
        `abandoned_in_replay`, for a rebuilt orchestrator to ask again), and not for an outcome
        already in."""
        if self.disposing:
            return
        future = self.futures.get(sequence)
        if future is not None and future.done() and not future.cancelled():
            return  # its outcome came: nothing runs any more
        if self.replaying:
            self.abandoned_in_replay.add(sequence)
            return
        self.commands.append(
            CancelActivity(self.workflow_id, sequence, activity_run_id(self.workflow_id, sequence), activity)
        )

    @property
    def replaying(self) -> bool:
        return self.dcursor < self.window_end or self.window_end < len(self.history)

    # -- new events ----------------------------------------------------------------------------

    @property
    def next_sequence(self) -> int:
        return self.history[-1].sequence + len(self.new_events) + 1

    def record(self, model: type[HistoryEvent], **fields: Any) -> HistoryEvent:
        """Append a new event of ``model`` at the next sequence."""
        event = model(workflow_id=self.workflow_id, sequence=self.next_sequence, **fields)
        self.new_events.append(event)
        return event

    def history_length(self) -> int:
        """Events of this run the code has seen: deterministic, whatever the caller's batching."""
        return self.delivering - self.started.sequence + 1 + self.emitted_since

    # -- inputs --------------------------------------------------------------------------------

    def future_for(self, sequence: int) -> "asyncio.Future[Any]":
        future = self.futures.get(sequence)
        if future is None:
            future = self.futures[sequence] = asyncio.Future(loop=self.loop)
        return future

    def _deliver(self, event: HistoryEvent) -> None:
        self._deliverers[type(event)](self, event)

    def _started(self, event: WorkflowStarted) -> None:
        definition = self.definition
        self.instance = definition.cls()
        self.main = self.loop.spawn(self._body(definition, event.input), "run")

    def _activity_completed(self, event: ActivityCompleted) -> None:
        _resolve(self._result_for(event.scheduled_sequence, self.activities, event), event.result)

    def _activity_failed(self, event: ActivityFailed) -> None:
        name = self.activities.get(event.scheduled_sequence, "?")
        error = ActivityTimeoutError if event.error_type == SCHEDULE_TO_CLOSE_TIMEOUT else ActivityError
        _reject(
            self._result_for(event.scheduled_sequence, self.activities, event),
            error(name, event.error_type, event.message, permanent=event.permanent),
        )

    def _timer_fired(self, event: WorkflowTimerFired) -> None:
        if event.started_sequence not in self.cancelled_timers:
            _resolve(self._result_for(event.started_sequence, self.timers, event), None)

    def _cancel_requested(self, event: CancelRequested) -> None:
        self._cancel(event.reason)

    def _child_completed(self, event: ChildWorkflowCompleted) -> None:
        _resolve(self._result_for(event.initiated_sequence, self.children, event), event.result)

    def _child_failed(self, event: ChildWorkflowFailed) -> None:
        _reject(
            self._result_for(event.initiated_sequence, self.children, event),
            ChildWorkflowError(
                event.child_workflow_id, event.error_type, event.message, cancelled=event.cancelled
            ),
        )

    _deliverers: ClassVar[dict[type[HistoryEvent], Callable[[Any, Any], None]]] = {
        WorkflowStarted: _started,
        ActivityCompleted: _activity_completed,
        ActivityFailed: _activity_failed,
        WorkflowTimerFired: _timer_fired,
        SignalReceived: lambda self, event: self._signal(event),
        CancelRequested: _cancel_requested,
        ChildWorkflowCompleted: _child_completed,
        ChildWorkflowFailed: _child_failed,
    }

    def _result_for(self, sequence: int, known: dict[int, Any], event: HistoryEvent) -> "asyncio.Future[Any]":
        future = self.futures.get(sequence)
        if future is None or sequence not in known:
            raise InvalidHistory(
                f"{self.workflow_id}: {describe_event(event)} at {event.sequence} answers sequence {sequence}, "
                "which the code did not ask for"
            )
        return future

    async def _body(self, definition: WorkflowDefinition, raw: dict[str, Any]) -> Any:
        if definition.input is None:
            return await definition.run(self.instance)
        return await definition.run(self.instance, definition.input.load(raw))

    def _signal(self, event: SignalReceived) -> None:
        handler = self.definition.signals.get(event.signal)
        if handler is None:
            waiters = self.signal_waiters.get(event.signal)
            while waiters and waiters[0].done():
                waiters.popleft()
            if waiters:
                waiters.popleft().set_result(event.payload)
            else:
                self.signal_buffers.setdefault(event.signal, deque()).append(event.payload)
            return
        try:
            args = () if handler.payload is None else (handler.payload.load(event.payload),)
            outcome = handler.method(self.instance, *args)
        except (NonDeterminismError, ContinueAsNew):
            raise
        except BaseException as err:  # noqa: BLE001 - a failing handler fails the run, like a failing body
            self._handler_failed(err, event.signal)
            return
        if isinstance(outcome, Coroutine):
            task = self.loop.spawn(outcome, f"signal {event.signal}")
            task.add_done_callback(lambda done: self._handler_done(done, event.signal))

    def _handler_done(self, task: "asyncio.Task[Any]", signal: str) -> None:
        if task.cancelled() or self.disposing:
            return
        exc = task.exception()
        if exc is not None:
            self._handler_failed(exc, signal)

    def _handler_failed(self, error: BaseException, signal: str) -> None:
        """A signal handler raised: the run fails with ``error``, as if the body had raised it.

        The body is cancelled first (a CancelledError at its current await, deferred while it
        compensates or awaits a step of its `async with Saga()` block, as a cancel request is), so
        its Saga, except or finally undoes what was done before the run closes. Histories recorded before this rule (no `SIGNAL_FAILURE_COMPENSATES` marker at
        this point) closed the run at once and replay that way.
        """
        if self.handler_failure is not None:
            return
        self.handler_failure = error
        main = self.main
        if main is None or main.done() or not self.patched(SIGNAL_FAILURE_COMPENSATES, deprecated=False):
            return
        self.failing_from_handler = True
        reason = f"signal handler {signal!r} failed: {type(error).__name__}: {error}"
        if self.shield > 0 or self.saga_steps_in_flight > 0:
            # As for a cancel request: raised at the body's next await, once its compensation is
            # done or the saga step in flight has its undo registered.
            self.cancel_pending = True
        else:
            main.cancel(reason[:1000])

    def _cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            # The first request's reason is the run's (a second cancel while the first one is being
            # honoured changes nothing), as the read model shows it.
            self.cancel_reason = reason
        main = self.main
        if main is None or main.done():
            self.cancel_pending = False
            return
        if self.shield > 0 or (
            self.saga_steps_in_flight > 0 and self.patched(CANCEL_AWAITS_SAGA_STEP, deprecated=False)
        ):
            # Compensating, or awaiting a forward step whose effect may be happening right now:
            # raised at the body's next await, once the compensation is done or the step's undo
            # is registered.
            self.cancel_pending = True
            return
        main.cancel(reason or "workflow cancel requested")

    def check_cancel(self) -> None:
        """Raise the deferred cancel at the code's next await (after a shielded compensation, or
        after the saga step that was in flight)."""
        if self.cancel_pending and self.shield == 0:
            self.cancel_pending = False
            raise asyncio.CancelledError(self.cancel_reason or "workflow cancel requested")

    # -- the end -------------------------------------------------------------------------------

    def _finish(self, main: "asyncio.Task[Any]") -> None:
        exc: BaseException | None = asyncio.CancelledError() if main.cancelled() else main.exception()
        if (
            self.failing_from_handler
            and self.handler_failure is not None
            and not isinstance(exc, NonDeterminismError)
        ):
            # However the cancelled body ended (re-raised, compensated and returned, continued as
            # new), the handler's failure is the run's: a signal handler's error is never lost.
            self._finish_with_error(self.handler_failure)
            return
        if exc is None:
            try:
                result = self.definition.result.dump(main.result())
                check_value(result, "the workflow's result")
            except Exception as err:  # noqa: BLE001 - an unserialisable result fails the run, with why
                self._finish_with_error(err)
                return
            self._close(WorkflowCompleted, result=result)
        elif isinstance(exc, ContinueAsNew):
            self._close(WorkflowContinuedAsNew, workflow_type=exc.workflow_type, input=exc.input)
        elif isinstance(exc, asyncio.CancelledError):
            self._close(
                WorkflowCancelled, reason=(self.cancel_reason or "")[:1000], compensated=self._compensated()
            )
        elif isinstance(exc, NonDeterminismError):
            raise exc
        else:
            # Anything else the code raised, `SystemExit` and other BaseExceptions included, fails
            # this workflow: workflow code never takes down the orchestrator deciding it.
            self._finish_with_error(exc)

    def _finish_with_error(self, exc: BaseException) -> None:
        error_type = (
            exc.error_type if isinstance(exc, ActivityError | ChildWorkflowError) else type(exc).__name__
        )
        message = exc.error_message if isinstance(exc, ActivityError | ChildWorkflowError) else str(exc)
        # Storable: workflow code may raise with any text, and WorkflowFailed's consumers refuse a
        # NUL or a lone surrogate (the acceptance rule); a refused end would never be recorded.
        self._close(
            WorkflowFailed,
            error_type=storable(error_type[:400]),
            message=storable(message[:10_000]),
            compensated=self._compensated(),
        )

    def _compensated(self) -> bool:
        return self.compensations_ran and self.compensations_ok

    def _close(self, kind: type[HistoryEvent], **fields: Any) -> None:
        recorded = self.match(kind, None)
        self.closed = recorded if recorded is not None else self.record(kind, **fields)
        if recorded is None:
            self.commands.extend(closing_commands(self, self.closed))

    # -- recorded values -----------------------------------------------------------------------

    def marker(self, kind: str, make: Callable[[int], Any]) -> Any:
        """A `now` / `random` / `uuid` marker's value: recorded on replay, made (and recorded) when new."""
        recorded = self.match(MarkerRecorded, (kind, None))
        if recorded is not None:
            return recorded.value  # type: ignore[attr-defined]
        sequence = self.next_sequence
        value = make(sequence)
        self.record(MarkerRecorded, kind=kind, value=value)
        return value

    def upsert_search_attributes(self, updates: dict[str, SearchAttribute | None]) -> None:
        """Record (or, on replay, match) an upsert and apply it to the run's search attributes.

        Raises:
            ValueError: the run's attributes after it would pass a limit (nothing is recorded).
        """
        after = merged(self.search_attributes, updates)
        check_search_attributes(after)
        key = upsert_key(updates)
        if self.match(SearchAttributesUpserted, key) is None:
            self.record(SearchAttributesUpserted, search_attributes=updates)
        self.search_attributes = after

    def upsert_memo(self, updates: dict[str, Any]) -> None:
        """Record (or, on replay, match) a memo upsert and apply it to the run's memo.

        Raises:
            ValueError: the memo after it would pass its limit (nothing is recorded).
        """
        after = merged(self.memo, updates)
        check_memo(after)
        if self.match(MemoUpserted, memo_key(updates)) is None:
            self.record(MemoUpserted, memo=updates)
        self.memo = after

    def answer_query(self, query: QueryDefinition, arg: Any, now: datetime) -> Any:
        """Run ``query``'s handler on the workflow's state as the history left it, read-only, and
        return its result as JSON.

        Raises:
            QueryError: the code has not started, the argument does not fit the handler, the
                handler tried to record something, raised, or returned what is not JSON.
        """
        if self.instance is None:
            raise QueryError(
                f"workflow {self.workflow_id}: its code has not started, there is no state to read"
            )
        name = query.name
        try:
            args = () if query.arg is None else (query.arg.load(arg),)
        except ValueError as err:
            raise QueryError(f"query {name!r}: the argument does not fit its handler: {err}") from None
        previous = enter(self)
        self.read_only, self.now = name, now
        try:
            value = query.method(self.instance, *args)
        except QueryError:
            raise
        except Exception as err:
            raise QueryError(f"query {name!r} raised {type(err).__name__}: {err}") from err
        finally:
            self.read_only = None
            leave(previous)
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise QueryError(
                f"query {name!r} returned an awaitable: a query handler may only read (await nothing, "
                "start nothing)"
            )
        try:
            return query.result.dump(value)
        except (ValueError, TypeError) as err:
            raise QueryError(f"query {name!r} returned what is not JSON: {err}") from None

    def seeded(self, sequence: int) -> _random.Random:
        """A generator seeded by the run and the marker's sequence: the step stays pure."""
        seed = sha256(f"{self.started.command_id}|{self.workflow_id}|{sequence}".encode()).digest()
        return _random.Random(seed)  # noqa: S311 - a replayable value, documented as not for secrets

    def uuid_at(self, sequence: int) -> str:
        return str(_uuid.UUID(int=self.seeded(sequence).getrandbits(128), version=4))


def _resolve(future: "asyncio.Future[Any]", value: Any) -> None:
    # A future is already done when the task waiting for it was cancelled away (it is cancelled).
    if not future.done():
        future.set_result(value)


def _reject(future: "asyncio.Future[Any]", error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
