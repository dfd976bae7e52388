"""Test workflows offline: their activities in process, a virtual clock that skips ahead.

`WorkflowEnvironment` is a small in-process orchestrator around the same `WorkflowRuntime` the
orchestrator service uses; with ``replay_every_step=True`` it replays the whole history after every
decision and fails on any change. Virtual time jumps to the next timer only while no activity runs;
a timer that is due (a `sleep(0)`) fires at once, activities running or not, so workflow code can
cancel an activity in flight. A test may send a signal or a cancel from another task while a
`result()` is waiting (an activity of its own blocked on an event, say), to land it mid-step. An
activity its workflow abandons (the code cancelled it, or the workflow ended) is cancelled as the
claimer cancels it: `asyncio.CancelledError` at its current await, `ctx.is_cancelled()` true, a
retry not started, and its outcome dropped.
Examples: docs/workflows.md, "Testing".
"""

import asyncio
import heapq
import itertools
import json
import random as _random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow.contracts.search import check_memo, typed_search_attributes
from slotflow.contracts.workflows import (
    TERMINAL_EVENTS,
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    HistoryEvent,
    SignalReceived,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowStarted,
    WorkflowTimerFired,
    current_memo,
    current_search_attributes,
)
from slotflow.core.retry import is_retryable, next_retry_delay
from slotflow.runs.context import FencedWrites, RunContext
from slotflow.runs.heartbeats import HeartbeatTimeout, silence_message
from slotflow.runs.registry import REGISTRY, HandlerFn, HandlerRegistry, UnknownHandler, run_callable
from slotflow.workflow._events import SCHEDULE_TO_CLOSE_TIMEOUT, describe_event
from slotflow.workflow.commands import (
    CancelActivity,
    CancelTimer,
    Command,
    ContinueAsNew,
    NotifyParent,
    RequestCancelWorkflow,
    ScheduleActivity,
    StartChildWorkflow,
    StartTimer,
)
from slotflow.workflow.definition import definition_of, to_json, to_json_object
from slotflow.workflow.errors import NonDeterminismError, WorkflowError
from slotflow.workflow.payloads import DEFAULT_THRESHOLD, PayloadStore, offload_payloads, resolve_payloads
from slotflow.workflow.runtime import DEFAULT_MAX_HISTORY_EVENTS, WorkflowRuntime

__all__ = ["WorkflowEnvironment", "WorkflowFailureError", "WorkflowHandle"]

START = datetime(2026, 1, 1, tzinfo=UTC)


class WorkflowFailureError(WorkflowError):
    """The workflow ended failed or cancelled: raised by `WorkflowHandle.result()`."""

    def __init__(self, workflow_id: str, event: HistoryEvent) -> None:
        self.workflow_id = workflow_id
        self.event = event
        self.cancelled = isinstance(event, WorkflowCancelled)
        self.error_type: str = getattr(event, "error_type", "WorkflowCancelled")
        self.error_message: str = getattr(event, "message", getattr(event, "reason", ""))
        self.compensated: bool = getattr(event, "compensated", False)
        status = "was cancelled" if self.cancelled else f"failed with {self.error_type}"
        super().__init__(f"workflow {workflow_id} {status}: {self.error_message}")


def _ended(run: "_Workflow") -> bool:
    """Whether the run has ended (asked afresh: a decision may have just ended it)."""
    return run.closed is not None


@dataclass
class _Workflow:
    workflow_id: str
    #: What the runtime sees (payloads resolved) and, with a payload store, what a topic would hold
    #: (payloads offloaded; brought up to date at every decision).
    history: list[HistoryEvent] = field(default_factory=list)
    stored: list[HistoryEvent] = field(default_factory=list)
    dirty: bool = True

    @property
    def closed(self) -> HistoryEvent | None:
        last = self.history[-1] if self.history else None
        return last if isinstance(last, TERMINAL_EVENTS) else None


class WorkflowHandle:
    """A workflow started in the environment."""

    def __init__(self, env: "WorkflowEnvironment", workflow_id: str) -> None:
        self._env = env
        self.id = workflow_id

    @property
    def history(self) -> list[HistoryEvent]:
        """Every event of the workflow id so far (all its runs), payloads resolved."""
        return list(self._env._workflows[self.id].history)

    async def query(self, query: str, arg: Any = None) -> Any:
        """Ask the workflow's `@workflow.query` handler ``query`` (`WorkflowEnvironment.query`)."""
        return await self._env.query(self.id, query, arg)

    async def result(self) -> Any:
        """Run (skipping time) until the workflow ends; its result.

        Raises:
            WorkflowFailureError: it failed or was cancelled.
            WorkflowError: it waits for something only the test can bring (a signal).
            NonDeterminismError: with ``replay_every_step``, a replay decided differently.
        """
        run = self._env._workflows[self.id]
        await self._env._pump(until=lambda: run.closed is not None, skip_time=True)
        closed = run.closed
        if closed is None:
            raise WorkflowError(
                f"workflow {self.id} waits and nothing in the environment can move it on "
                "(send it a signal, or advance time with env.sleep())"
            )
        if isinstance(closed, WorkflowCompleted):
            return closed.result
        raise WorkflowFailureError(self.id, closed)


class WorkflowEnvironment:
    """An in-process orchestrator with a virtual clock; see the module docstring."""

    def __init__(
        self,
        workflows: Iterable[type[object]],
        *,
        activities: HandlerRegistry | Mapping[str, Callable[..., Any]] | None = None,
        start_time: datetime = START,
        replay_every_step: bool = False,
        max_history_events: int = DEFAULT_MAX_HISTORY_EVENTS,
        suggest_continue_as_new_at: int | None = None,
        payload_store: PayloadStore | None = None,
        payload_threshold: int = DEFAULT_THRESHOLD,
        seed: int = 0,
    ) -> None:
        self._classes = list(workflows)
        self._runtime = WorkflowRuntime(
            self._classes,
            max_history_events=max_history_events,
            suggest_continue_as_new_at=suggest_continue_as_new_at,
            cache_size=256,
        )
        self._checker = (
            WorkflowRuntime(
                self._classes,
                max_history_events=max_history_events,
                suggest_continue_as_new_at=suggest_continue_as_new_at,
            )
            if replay_every_step
            else None
        )
        self._activities = activities if activities is not None else REGISTRY
        self.now = start_time
        self._store = payload_store
        self._threshold = payload_threshold
        self._draws = _random.Random(seed)  # noqa: S311 - retry jitter, repeatable in tests
        self._workflows: dict[str, _Workflow] = {}
        self._running: dict[asyncio.Task[Any], tuple[str, ScheduleActivity, int]] = {}
        #: Activity runs their workflow abandoned: cancelled if running, never started again.
        self._cancelled_runs: set[str] = set()
        self._cancellations: dict[str, threading.Event] = {}
        #: Each activity run's last heartbeat details, read by its next attempt.
        self._heartbeat_details: dict[str, Any] = {}
        self._timers: list[tuple[datetime, int, Callable[[], None]]] = []
        self._cancelled_timers: set[str] = set()
        self._order = itertools.count()
        self._commands = itertools.count(1)

    async def __aenter__(self) -> "WorkflowEnvironment":
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        self._running.clear()

    # -- what a test does ----------------------------------------------------------------------

    async def start_workflow(
        self,
        workflow: type[object] | str,
        input: Any = None,
        *,
        id: str,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> WorkflowHandle:
        """Start a workflow (its first activities run; time does not move). ``memo`` and
        ``search_attributes`` as `Client.start_workflow` takes them.

        Raises:
            ValueError: a search attribute or memo the start would refuse.
        """
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
        attributes = typed_search_attributes(search_attributes)
        check_memo(dict(memo or {}))
        self._start(
            id,
            name,
            to_json_object(input, "the workflow input"),
            memo=dict(memo or {}),
            search_attributes=attributes,
        )
        await self._pump()
        return WorkflowHandle(self, id)

    async def execute_workflow(
        self,
        workflow: type[object] | str,
        input: Any = None,
        *,
        id: str,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> Any:
        """Start a workflow and run it to its end; its result (see `WorkflowHandle.result`)."""
        handle = await self.start_workflow(
            workflow, input, id=id, memo=memo, search_attributes=search_attributes
        )
        return await handle.result()

    def search_attributes(self, workflow_id: str) -> dict[str, Any]:
        """The workflow's search attributes as its history leaves them (its start's and its
        upserts'), as plain values: what the read model indexes."""
        attributes = current_search_attributes(self._workflows[workflow_id].history)
        return {name: attribute.value for name, attribute in attributes.items()}

    def memo(self, workflow_id: str) -> dict[str, Any]:
        """The workflow's memo as its history leaves it (its start's and its upserts'): what the
        read model shows."""
        return current_memo(self._workflows[workflow_id].history)

    def handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(self, workflow_id)

    def history(self, workflow_id: str) -> list[HistoryEvent]:
        """The workflow's history as the topic would hold it (large payloads by reference)."""
        run = self._workflows[workflow_id]
        return list(run.stored if self._store is not None else run.history)

    async def signal(self, workflow_id: str, signal: str, payload: Any = None) -> None:
        """Deliver a signal; the workflow reacts before this returns (time does not move)."""
        self._append(
            self._workflows[workflow_id],
            SignalReceived,
            signal=signal,
            payload=to_json_object(payload, "a signal payload"),
        )
        await self._pump()

    async def query(self, workflow_id: str, query: str, arg: Any = None) -> Any:
        """Answer the query ``query`` (with ``arg``) from the workflow's state now, as the
        orchestrator does: replayed from its history, read-only, nothing appended (time does not
        move). A closed workflow answers from its final state.

        Raises:
            UnknownQuery: the workflow has no such `@workflow.query` handler.
            QueryError: the handler tried to do more than read, or raised.
        """
        await self._pump()
        return self._runtime.query(self._workflows[workflow_id].history, query, arg, now=self.now)

    async def cancel(self, workflow_id: str, reason: str = "") -> None:
        """Ask the workflow to cancel; it reacts before this returns (time does not move)."""
        self._request_cancel(workflow_id, reason)
        await self._pump()

    async def sleep(self, duration: timedelta) -> None:
        """Let ``duration`` of virtual time pass, firing the timers due on the way."""
        until = self.now + duration
        await self._pump(skip_time=True, limit=until)
        self.now = max(self.now, until)

    # -- the orchestrator's part ---------------------------------------------------------------

    def _start(self, workflow_id: str, workflow_type: str, input: dict[str, Any], **parent: Any) -> bool:
        if workflow_id in self._workflows:
            return False
        run = self._workflows[workflow_id] = _Workflow(workflow_id)
        started = WorkflowStarted(
            workflow_id=workflow_id,
            sequence=1,
            workflow_type=workflow_type,
            input=input,
            command_id=f"env-{next(self._commands)}",
            **parent,
        )
        run.history.append(started)
        return True

    def _append(self, run: _Workflow, model: type[HistoryEvent], **fields: Any) -> None:
        if run.closed is not None:
            return
        event = model(workflow_id=run.workflow_id, sequence=run.history[-1].sequence + 1, **fields)
        run.history.append(event)
        run.dirty = True

    async def _pump(
        self,
        *,
        until: Callable[[], bool] = lambda: False,
        skip_time: bool = False,
        limit: datetime | None = None,
    ) -> None:
        while True:
            while any(run.dirty for run in self._workflows.values()):
                for run in list(self._workflows.values()):
                    if run.dirty:
                        await self._decide(run)
            if until():
                return
            if self._timers and self._timers[0][0] <= self.now:
                # Due now (a `sleep(0)`, or due when the clock last moved): it fires whatever is
                # running, as the ticker does, so the code can cancel an activity in flight.
                heapq.heappop(self._timers)[2]()
                continue
            if self._running:
                done, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
                # Another pump (a signal sent while `result()` waits) may have taken some already.
                finished = [task for task in done if task in self._running]
                for task in sorted(finished, key=lambda t: self._running[t][1].run_id):
                    self._finished(task)
                continue
            if not skip_time or not self._timers or (limit is not None and self._timers[0][0] > limit):
                return
            fire_at, _, fire = heapq.heappop(self._timers)
            self.now = max(self.now, fire_at)
            fire()

    async def _decide(self, run: _Workflow) -> None:
        run.dirty = False
        if run.closed is not None:
            return
        decision = self._runtime.replay(run.history, now=self.now)
        events = list(decision.events)
        if self._store is not None:
            # What a topic would hold: every event with its large payloads by reference (the inputs
            # appended since the last decision too); what the code sees is that, resolved again.
            await self._offload_tail(run)
            stored = await offload_payloads(events, self._store, threshold=self._threshold)
            events = await resolve_payloads(stored, self._store)
            run.stored.extend(stored)
        run.history.extend(events)
        if self._checker is not None:
            self._check_replay(run)
        for command in decision.commands:
            self._send(run, command)
        if _ended(run):
            # As the orchestrator does when a run ends: what it left running is cancelled.
            for workflow_id, command, _ in list(self._running.values()):
                if workflow_id == run.workflow_id:
                    self._cancel_activity(command.run_id)

    async def _offload_tail(self, run: _Workflow) -> None:
        assert self._store is not None  # noqa: S101 - only called with a payload store
        tail = run.history[len(run.stored) :]
        run.stored.extend(await offload_payloads(tail, self._store, threshold=self._threshold))

    def _check_replay(self, run: _Workflow) -> None:
        assert self._checker is not None  # noqa: S101 - only called with replay_every_step
        again = self._checker.replay(run.history, now=self.now)
        if again.events:
            extra = again.events[0]
            raise NonDeterminismError(
                run.workflow_id,
                extra.sequence,
                "the history as just recorded",
                f"{describe_event(extra)} on replay",
                hint="replay_every_step: the code decided differently when re-run from its history",
            )

    def _send(self, run: _Workflow, command: Command) -> None:
        if isinstance(command, ScheduleActivity):
            self._attempt(run.workflow_id, command, 1)
        elif isinstance(command, StartTimer):
            self._at(command.fire_at, lambda: self._fire(run, command))
        elif isinstance(command, CancelTimer):
            self._cancelled_timers.add(command.timer_id)
        elif isinstance(command, CancelActivity):
            self._cancel_activity(command.run_id)
        elif isinstance(command, StartChildWorkflow):
            self._start_child(run, command)
        elif isinstance(command, RequestCancelWorkflow):
            self._request_cancel(command.workflow_id, command.reason)
        elif isinstance(command, ContinueAsNew):
            started = WorkflowStarted(
                workflow_id=run.workflow_id,
                sequence=command.next_sequence,
                workflow_type=command.workflow_type,
                input=command.input,
                command_id=f"{run.workflow_id}#{command.next_sequence - 1}",
                continued_from=command.next_sequence - 1,
                parent_workflow_id=command.parent_workflow_id,
                parent_sequence=command.parent_sequence,
                parent_close_policy=command.parent_close_policy,
                memo=current_memo(run.history),
                search_attributes=current_search_attributes(run.history),
            )
            run.history.append(started)
            run.dirty = True
        elif isinstance(command, NotifyParent):
            self._notify_parent(command)

    def _at(self, when: datetime, fire: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (when, next(self._order), fire))

    def _fire(self, run: _Workflow, timer: StartTimer) -> None:
        if timer.timer_id not in self._cancelled_timers:
            self._append(
                run,
                WorkflowTimerFired,
                started_sequence=timer.sequence,
                timer_id=timer.timer_id,
                fired_at=self.now,
            )

    def _request_cancel(self, workflow_id: str, reason: str) -> None:
        run = self._workflows.get(workflow_id)
        if run is not None:
            self._append(run, CancelRequested, reason=reason[:1000])

    def _start_child(self, run: _Workflow, command: StartChildWorkflow) -> None:
        started = self._start(
            command.child_workflow_id,
            command.workflow_type,
            command.input,
            parent_workflow_id=run.workflow_id,
            parent_sequence=command.sequence,
            parent_close_policy=command.parent_close_policy,
            memo=command.memo,
            search_attributes=command.search_attributes,
        )
        if not started:
            self._append(
                run,
                ChildWorkflowFailed,
                initiated_sequence=command.sequence,
                child_workflow_id=command.child_workflow_id,
                error_type="WorkflowAlreadyStarted",
                message=f"workflow id {command.child_workflow_id} is taken",
            )

    def _notify_parent(self, notice: NotifyParent) -> None:
        parent = self._workflows.get(notice.parent_workflow_id)
        if parent is None:
            return
        common = {"initiated_sequence": notice.parent_sequence, "child_workflow_id": notice.child_workflow_id}
        if notice.outcome == "completed":
            self._append(parent, ChildWorkflowCompleted, result=notice.result, **common)
        else:
            self._append(
                parent,
                ChildWorkflowFailed,
                error_type=notice.error_type,
                message=notice.message[:10_000],
                cancelled=notice.outcome == "cancelled",
                **common,
            )

    # -- activities ----------------------------------------------------------------------------

    def _attempt(self, workflow_id: str, command: ScheduleActivity, attempt: int) -> None:
        if command.run_id in self._cancelled_runs:
            return  # abandoned while it waited for its retry: never starts
        task = asyncio.ensure_future(self._run_activity(workflow_id, command, attempt))
        self._running[task] = (workflow_id, command, attempt)

    def _cancel_activity(self, run_id: str) -> None:
        """Cancel an abandoned activity's run, as the claimer does: the running attempt gets
        CancelledError at its current await (`ctx.is_cancelled()` turns true), and nothing more of
        it reaches the workflow."""
        self._cancelled_runs.add(run_id)
        cancellation = self._cancellations.get(run_id)
        if cancellation is not None:
            cancellation.set()
        for task, (_, command, _) in self._running.items():
            if command.run_id == run_id:
                task.cancel()

    async def _run_activity(self, workflow_id: str, command: ScheduleActivity, attempt: int) -> Any:
        handler = self._handler(command.activity)
        # As the claimer does: details recorded for the next attempt, and an attempt silent past
        # its heartbeat_timeout (real time, as start_to_close) fails with HeartbeatTimeout.
        timeout = command.retry.heartbeat_timeout
        silence = asyncio.timeout(timeout.total_seconds()) if timeout is not None else None
        waiting = [True]  # a Timeout cannot be moved once its block is left

        def beat(details: str | None) -> None:
            if details is not None:
                self._heartbeat_details[command.run_id] = json.loads(details)
            if silence is not None and timeout is not None and waiting[0] and not silence.expired():
                silence.reschedule(asyncio.get_running_loop().time() + timeout.total_seconds())

        context = RunContext(
            run_id=command.run_id,
            job_id=workflow_id,
            slot=self.now,
            attempt=attempt,
            fence_token=attempt,
            payload=command.payload,
            kind="activity",
            owner="workflow-environment",
            fenced=FencedWrites(token=attempt, pool=None),
            workflow_id=workflow_id,
            sequence=command.sequence,
            handler=command.activity,
            heartbeat_details=self._heartbeat_details.get(command.run_id),
            on_heartbeat=beat,
            cancellation=self._cancellations.setdefault(command.run_id, threading.Event()),
        )
        async with asyncio.timeout(command.retry.start_to_close.total_seconds()):
            if silence is None or timeout is None:
                return to_json(await handler(context))
            try:
                async with silence:
                    try:
                        return to_json(await handler(context))
                    finally:
                        waiting[0] = False
            except TimeoutError:
                if silence.expired():
                    raise HeartbeatTimeout(silence_message(timeout)) from None
                raise

    def _handler(self, name: str) -> HandlerFn:
        if isinstance(self._activities, HandlerRegistry):
            return self._activities.get(name)
        try:
            fn = self._activities[name]
        except KeyError:
            raise UnknownHandler(f"no activity {name!r} in this WorkflowEnvironment") from None
        # A fake that takes an input gets it validated from the payload, as a registered one does.
        return run_callable(name, fn)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        workflow_id, command, attempt = self._running.pop(task)
        run = self._workflows[workflow_id]
        if task.cancelled() or command.run_id in self._cancelled_runs:
            return  # abandoned by its workflow: recorded cancelled, no outcome the workflow takes
        error = task.exception()
        if error is None:
            self._append(run, ActivityCompleted, scheduled_sequence=command.sequence, result=task.result())
            return
        policy = command.retry
        delay = next_retry_delay(policy, attempt=attempt, error=error, draw=self._draws.random())
        deadline = command.schedule_to_close_deadline
        if delay is not None and (deadline is None or self.now + delay <= deadline):
            self._at(self.now + delay, lambda: self._attempt(workflow_id, command, attempt + 1))
            return
        timed_out = delay is not None
        permanent = timed_out or not is_retryable(error, non_retryable=policy.non_retryable)
        if command.on_dead_letter == "park" and not timed_out:
            # As the orchestrator does with a dead-lettered run: the step is marked and stays
            # pending (this environment has no DLQ to redrive it from).
            self._append(
                run,
                ActivityParked,
                scheduled_sequence=command.sequence,
                reason="permanent_error" if permanent else "attempts_exhausted",
                error_type=type(error).__name__,
                message=str(error)[:10_000],
            )
            return
        self._append(
            run,
            ActivityFailed,
            scheduled_sequence=command.sequence,
            error_type=SCHEDULE_TO_CLOSE_TIMEOUT if timed_out else type(error).__name__,
            message=str(error)[:10_000],
            permanent=permanent,
        )
