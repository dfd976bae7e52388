"""`WorkflowRuntime.replay`: the pure step from a run's history to its next events and commands.

    runtime = WorkflowRuntime(workflows=[Checkout])
    decision = runtime.replay(history, now=database_now)
    # append decision.events (sequences n+1, ...), then send decision.commands

Pure: no I/O, no wall clock, no threads; the same history gives the same decision. `now` is read
only when a new timer, deadline or `workflow.now()` marker is recorded, never on replay. A history
that the code no longer matches raises `NonDeterminismError` (the caller appends
NonDeterminismDetected and acts on nothing).

With `cache_size` > 0 the runtime keeps each workflow's execution after a replay and, when the
next history is the previous one plus the events it returned plus new inputs, advances it instead
of replaying from the start (the decisions are the same either way; a test holds it to that).
"""

import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from slotflow.contracts.workflows import RUN_ENDING_EVENTS, HistoryEvent, WorkflowFailed, WorkflowStarted
from slotflow.workflow._closing import closing_commands
from slotflow.workflow._events import HISTORY_LIMIT_ERROR
from slotflow.workflow._execution import Execution
from slotflow.workflow._guards import guard_namespaces
from slotflow.workflow.commands import Decision
from slotflow.workflow.definition import WorkflowDefinition, definition_of
from slotflow.workflow.errors import InvalidHistory, NonDeterminismError, UnknownQuery, UnknownWorkflowType

__all__ = ["Decision", "NonDeterminismError", "WorkflowRuntime"]

DEFAULT_MAX_HISTORY_EVENTS = 50_000


class WorkflowRuntime:
    """Runs registered workflow classes against their histories.

    ``max_history_events`` is the ceiling per run (default 50,000): a run that would pass it fails
    with `HistoryLimitExceeded` (never a truncation). `info().is_continue_as_new_suggested` turns
    true at ``suggest_continue_as_new_at`` events (default: 80% of the ceiling).
    """

    def __init__(
        self,
        workflows: Iterable[type[object]],
        *,
        max_history_events: int = DEFAULT_MAX_HISTORY_EVENTS,
        suggest_continue_as_new_at: int | None = None,
        cache_size: int = 0,
        query_cache_size: int = 0,
    ) -> None:
        if max_history_events < 3:
            raise ValueError("max_history_events must leave room for a start, a decision and an end")
        self._definitions: dict[str, WorkflowDefinition] = {}
        for cls in workflows:
            definition = definition_of(cls)
            existing = self._definitions.get(definition.name)
            if existing is not None and existing.cls is not cls:
                raise ValueError(f"two workflow classes are named {definition.name!r}")
            self._definitions[definition.name] = definition
        self.max_history_events = max_history_events
        self.suggest_continue_as_new_at = (
            suggest_continue_as_new_at
            if suggest_continue_as_new_at is not None
            else max_history_events * 4 // 5
        )
        self._cache_size = cache_size
        self._cache: OrderedDict[str, tuple[Execution, int, list[HistoryEvent]]] = OrderedDict()
        self._query_cache_size = query_cache_size
        #: Executions that answered queries, each with the length and last event of its history.
        self._queried: OrderedDict[str, tuple[Execution, int, HistoryEvent]] = OrderedDict()
        guard_namespaces(definition.cls for definition in self._definitions.values())

    @property
    def workflow_types(self) -> list[str]:
        return sorted(self._definitions)

    def signal_refusal(self, workflow_type: str, signal: str, payload: dict[str, Any]) -> str | None:
        """Why a signal ``signal`` with ``payload`` cannot reach a ``workflow_type`` run: its
        `@workflow.signal` handler's declared parameter type does not take the payload. None when
        it does, when the signal has no handler (a `wait_signal` types it where it waits), or when
        the type is not served here."""
        definition = self._definitions.get(workflow_type)
        handler = definition.signals.get(signal) if definition is not None else None
        return handler.refusal(payload) if handler is not None else None

    def decide(self, history: Sequence[HistoryEvent], *, now: datetime) -> Decision:
        """Deprecated: `replay`, under its old name, for one release.

        "Decide" names the orchestrator's decision (one transaction for one workflow); what the
        runtime does is replay the history and run the code on, so the method is `replay`.
        """
        warnings.warn(
            "WorkflowRuntime.decide is deprecated and goes in the next release: call WorkflowRuntime.replay",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.replay(history, now=now)

    def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> Decision:
        """Replay ``history`` (its last run: from the last WorkflowStarted on) and advance the code.

        Raises:
            NonDeterminismError: the code and the history disagree (`WorkflowDeterminismError` when
                the code used something that cannot replay, such as asyncio.sleep).
            UnknownWorkflowType: the history's workflow type is not registered here.
            InvalidHistory: the history breaks the contract (a gap, no start, a stray result).
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (the database clock)")
        execution = self._cached(history) if self._cache else None
        if execution is None:
            start = run_start(history)
            execution = Execution(
                self._definition(history[start]),
                history,
                start,
                now=now,
                max_history_events=self.max_history_events,
                suggest_continue_as_new_at=self.suggest_continue_as_new_at,
            )
        start = execution.start
        key = execution.workflow_id
        try:
            execution.advance(history, now)
        except BaseException:
            self._cache.pop(key, None)
            execution.dispose()
            raise
        decision = self._decision(execution, history, start)
        if self._cache_size > 0 and not decision.closed:
            self._cache[key] = (execution, len(history), list(decision.events))
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                _, (evicted, _, _) = self._cache.popitem(last=False)
                evicted.dispose()
        else:
            self._cache.pop(key, None)
            execution.dispose()
        return decision

    def query(self, history: Sequence[HistoryEvent], name: str, arg: Any = None, *, now: datetime) -> Any:
        """Answer the query ``name`` with ``arg`` from the state ``history`` leaves (a closed
        workflow's final state too), and return its handler's result as JSON. Appends nothing.

        The history is replayed into an execution of its own, never the one the decisions use
        (`cache_size`), so whatever a handler does to the workflow object cannot reach a decision;
        the last `query_cache_size` of them are kept, each for the exact history it replayed.

        Raises:
            UnknownQuery: the workflow has no `@workflow.query` handler ``name``.
            QueryError: the handler tried to do more than read, raised, or returned what is not JSON.
            NonDeterminismError: the code no longer matches the history (the workflow is stuck).
            UnknownWorkflowType: the history's workflow type is not registered here.
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (the database clock)")
        start = run_start(history)
        definition = self._definition(history[start])
        handler = definition.queries.get(name)
        if handler is None:
            known = ", ".join(sorted(definition.queries)) or "none"
            raise UnknownQuery(
                f"workflow type {definition.name!r} has no query {name!r} (its queries: {known})"
            )
        key = history[-1].workflow_id
        entry = self._queried.pop(key, None)
        execution: Execution | None = None
        if entry is not None:
            kept, seen, last = entry
            if seen == len(history) and _same(history[-1], last):
                execution = kept
            else:
                kept.dispose()
        if execution is None:
            execution = Execution(
                definition,
                history,
                start,
                now=now,
                max_history_events=self.max_history_events,
                suggest_continue_as_new_at=self.suggest_continue_as_new_at,
            )
            try:
                execution.advance(history, now)
            except BaseException:
                execution.dispose()
                raise
        try:
            answer = execution.answer_query(handler, arg, now)
        finally:
            self._keep_queried(key, execution, history)
        return answer

    def _keep_queried(self, key: str, execution: Execution, history: Sequence[HistoryEvent]) -> None:
        if self._query_cache_size <= 0:
            execution.dispose()
            return
        self._queried[key] = (execution, len(history), history[-1])
        while len(self._queried) > self._query_cache_size:
            _, (evicted, _, _) = self._queried.popitem(last=False)
            evicted.dispose()

    def forget(self, workflow_id: str) -> None:
        """Drop a cached execution (its history was rewritten, or the workflow is gone)."""
        entry = self._cache.pop(workflow_id, None)
        if entry is not None:
            entry[0].dispose()

    def _definition(self, started: HistoryEvent) -> WorkflowDefinition:
        assert isinstance(started, WorkflowStarted)  # noqa: S101 - run_start found it
        definition = self._definitions.get(started.workflow_type)
        if definition is None:
            raise UnknownWorkflowType(
                f"workflow {started.workflow_id!r} is a {started.workflow_type!r}, which this runtime does not "
                f"know (registered: {', '.join(self.workflow_types) or 'none'})"
            )
        return definition

    def _cached(self, history: Sequence[HistoryEvent]) -> Execution | None:
        """The cached execution of this workflow, if ``history`` is what it saw, what it returned and
        new inputs after (only that tail is checked, so a cached step costs what the tail costs)."""
        if not history:
            return None
        entry = self._cache.pop(history[-1].workflow_id, None)
        if entry is None:
            return None
        execution, seen, produced = entry
        end = seen + len(produced)
        if (
            len(history) >= end
            and _same(history[execution.start], execution.started)
            and _same(history[seen - 1], execution.history[seen - 1])
            and all(_same(history[seen + i], event) for i, event in enumerate(produced))
            and _contiguous(history, seen - 1)
        ):
            execution.history = history
            execution.dcursor = execution._next_decision(end)
            return execution
        execution.dispose()
        return None

    def _decision(self, execution: Execution, history: Sequence[HistoryEvent], start: int) -> Decision:
        events, commands = execution.new_events, execution.commands
        closes = bool(events) and isinstance(events[-1], RUN_ENDING_EVENTS)
        closed = execution.closed is not None
        if closed and not events:
            return Decision(closed=True)
        total = len(history) - start + len(events)
        if (closes and total > self.max_history_events) or (not closes and total >= self.max_history_events):
            failure = WorkflowFailed(
                workflow_id=execution.workflow_id,
                sequence=history[-1].sequence + 1,
                error_type=HISTORY_LIMIT_ERROR,
                message=(
                    f"the run reached {len(history) - start} history events and its next decision would "
                    f"pass the limit of {self.max_history_events}; call workflow.continue_as_new() when "
                    "workflow.info().is_continue_as_new_suggested (nothing was truncated: the run is failed)"
                ),
            )
            execution.closed = failure
            return Decision(events=[failure], commands=closing_commands(execution, failure), closed=True)
        return Decision(
            events=list(events),
            commands=list(commands),
            closed=closed,
            abandoned_earlier=sorted(execution.abandoned_in_replay),
        )


def run_start(history: Sequence[HistoryEvent]) -> int:
    """Index of the last run's WorkflowStarted; checks the run's sequences are gap-free.

    Raises:
        InvalidHistory: empty, no WorkflowStarted, or a gap or another workflow's event in the run.
    """
    if not history:
        raise InvalidHistory("an empty history has no WorkflowStarted")
    start = len(history) - 1
    while start >= 0 and type(history[start]) is not WorkflowStarted:
        start -= 1
    if start < 0:
        raise InvalidHistory(f"history of {history[0].workflow_id!r} has no WorkflowStarted")
    first = history[start]
    workflow_id, expected = first.workflow_id, first.sequence
    for index in range(start, len(history)):
        event = history[index]
        if event.sequence != expected or event.workflow_id != workflow_id:
            raise InvalidHistory(
                f"history of {workflow_id!r}: expected sequence {expected} at position {index}, found "
                f"{event.workflow_id!r} sequence {event.sequence} (histories are gap-free and in order)"
            )
        expected += 1
    return start


def _contiguous(history: Sequence[HistoryEvent], index: int) -> bool:
    """Whether the events from ``index`` on continue one run of one workflow, gap-free."""
    first = history[index]
    workflow_id, expected = first.workflow_id, first.sequence
    for position in range(index, len(history)):
        event = history[position]
        if event.sequence != expected or event.workflow_id != workflow_id:
            return False
        if position > index and type(event) is WorkflowStarted:
            return False
        expected += 1
    return True


def _same(stored: HistoryEvent, expected: HistoryEvent) -> bool:
    """``stored`` is ``expected``: the very object (the orchestrator keeps the events this runtime
    produced, so that is the usual case, and a model's ``==`` compares every field in Python), or
    an equal one (read back from the table)."""
    return stored is expected or stored == expected
