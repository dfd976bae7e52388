"""One decision for one workflow, as a pure function: inputs and history in, what to append out.

`step` applies a workflow's waiting inputs in arrival order (commands, activity outcomes, fired
timers), turning each into the history event it means or an acknowledgement, then asks the
workflow runtime for the code's next moves. The caller (`deciding.py`) runs it inside the one
PostgreSQL transaction that appends the result, so the rules here are the only place a workflow's
history grows:

- an outcome counts only for something still pending (an activity's first RunCompleted or
  RunDeadLettered, a timer's first TimerFired); a late or duplicate one is dropped when its
  issuer's record backs it (a copy of a genuine outcome changes nothing), and refused like a forged
  one when it does not (nothing forged disappears without a trace: the system suite's hostile actor
  found such records dropped); a RunDeadLettered of an activity scheduled with
  `on_dead_letter="park"` only marks it (ActivityParked), so a redrive's outcome still counts;
- an outcome for something pending counts only when its issuer's record backs it
  (`slotflow.issuers`): an activity's when the claimer's record of the run (``records``) is in the
  state it claims, with its fence token, attempt and handler, and then the history records the
  claimer's result or error, never the event's; a timer's when it is the very timer the workflow
  started there and its fire time has come by the database clock (``clock``). Anything else is
  refused (`Step.refused`): parked in the DLQ by the caller, the workflow untouched;
- a retry of a parked activity (RetryActivity, or the dlq's redrive request routed to the
  workflow) counts only while the workflow still waits on that exact activity, it is parked, and
  the claimer's run is dead-lettered: ActivityRetried is appended and the activity's JobDue
  re-issued from its ActivityScheduled with the run's next redrive number; otherwise it is
  refused with the reason (the workflow closed, compensated the step, or the activity finished or
  is running), and every redrive request gets its answer (docs/decisions/0009);
- nothing is appended after a terminal event but a new run's WorkflowStarted, for a StartWorkflow
  whose `id_reuse_policy` allows reusing the id; every command still gets its answer;
- a SignalWorkflow whose payload its `@workflow.signal` handler's declared type does not take is
  rejected with the reason and never reaches the run;
- the runtime's events must continue the history gap-free, or nothing of them is kept;
- a replay that diverges appends NonDeterminismDetected and leaves the workflow `stuck`;
- an activity the workflow no longer waits on while its run may still be going (the run ended:
  completed, failed, cancelled, terminated or timed out, or continued as new; or the code cancelled
  the activity) is abandoned: the step asks the claimers to cancel its run (`Step.activity_cancels`,
  a CancelActivity each). Nothing is appended for it: an outcome that still comes is dropped as an
  outcome of anything no longer pending is (the claimer records the run `cancelled`, which sends
  no outcome the workflow takes).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    CancelRequested,
    CancelWorkflow,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    Envelope,
    HistoryEvent,
    Message,
    NonDeterminismDetected,
    RedriveRequested,
    RetryActivity,
    RunCompleted,
    RunDeadLettered,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.contracts.timers import deadline_timer_id as deadline_timer_id
from slotflow.contracts.timers import execution_timer_id as execution_timer_id
from slotflow.contracts.workflows import WORKFLOW_TERMINATED, current_memo, current_search_attributes
from slotflow.errors import SlotflowError
from slotflow.history import OpenWork
from slotflow.issuers import UNPROVEN_OUTCOME, RunRecord, Verdict, outcome_verdict, timer_verdict
from slotflow.kafka.records import Record
from slotflow_orchestrator.inputs import ChildOutcome

Status = Literal["running", "stuck", "completed", "failed", "cancelled"]
#: A workflow in one of these has ended: nothing is appended to its history again.
CLOSED: frozenset[Status] = frozenset(("completed", "failed", "cancelled"))

#: Error type of the WorkflowFailed a TerminateWorkflow appends.
TERMINATED = WORKFLOW_TERMINATED
#: Error type of the WorkflowFailed appended when the execution timeout passes.
TIMED_OUT = "WorkflowTimedOut"
#: Error type of the ActivityFailed appended when an activity's schedule-to-close deadline passes.
ACTIVITY_TIMED_OUT = "ScheduleToCloseTimeout"
#: Error type of the ChildWorkflowFailed a parent gets when its child could not start.
CHILD_NOT_STARTED = "ChildWorkflowNotStarted"
#: Continue-as-new runs one decision may start back to back (a loop that only continues).
MAX_RUNS_PER_DECISION = 10
#: Due timers (zero-length sleeps) one decision fires itself, in a row; the next one goes through
#: the ticker like any timer, so a loop of zero sleeps cannot hold a decision forever.
MAX_DUE_TIMERS_PER_DECISION = 100


class Diverged(SlotflowError):
    """The code asked for something else than the history recorded at ``sequence`` (the adapter
    raises it for the runtime's NonDeterminismError)."""

    def __init__(self, sequence: int, expected: str, got: str) -> None:
        super().__init__(f"replay diverged at {sequence}: history has {expected}, code did {got}")
        self.sequence = sequence
        self.expected = expected
        self.got = got


class BrokenDecision(SlotflowError):
    """The runtime returned events that do not continue the history (a runtime bug): nothing of
    the decision is kept, and the inputs wait for a fixed runtime."""


class WorkflowCode(Protocol):
    """The workflow runtime as the orchestrator uses it (adapter: `workflow_code.RuntimeWorkflowCode`)."""

    def knows(self, workflow_type: str) -> bool: ...

    def signal_refusal(self, workflow_type: str, signal: str, payload: dict[str, Any]) -> str | None:
        """Why the signal's payload cannot reach a run of ``workflow_type`` (its handler's declared
        parameter type refuses it), or None."""
        ...

    def replay(self, history: Sequence[HistoryEvent], *, now: datetime) -> "Moves":
        """The next events (sequences continuing ``history``) and child workflows to start.

        Raises:
            Diverged: the code took another path than the history.
        """
        ...


@dataclass(frozen=True, slots=True)
class Moves:
    """What the code did next on replay: new history events, timers to cancel, child workflows to start."""

    events: Sequence[HistoryEvent] = ()
    cancel_timers: Sequence[str] = ()
    children: Sequence[tuple[str, StartWorkflow]] = ()
    #: Sequences of the activities whose wait the code cancelled (their runs are to be cancelled).
    cancel_activities: Sequence[int] = ()
    #: Sequences of the activities the replayed history had already abandoned (asked again only
    #: when deciding anew: a rebuild lost the record of their cancels).
    abandoned_earlier: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class Input:
    """One waiting input: its envelope (the command id is its id) and its decoded message."""

    seq: int
    envelope: Envelope
    message: Message
    #: The stored value: the consumed record's, byte-exact (a refused one's dead letter carries it).
    raw: bytes = b""
    #: The consumed record it came from, read once the input is refused (None until then, for
    #: commands and own inputs): it is parked from it.
    origin: Record | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """An input its issuer's record does not back: parked in the DLQ with the verdict's reason."""

    input: Input
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Row:
    """The workflow's row as stored (None when the id was never started)."""

    workflow_type: str
    status: Status
    execution_deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """An answer to a workflow command: accepted, or rejected with a reason."""

    command_id: str
    command_type: str
    subject: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TimerRequest:
    """A durable timer to start at the ticker (the execution timeout)."""

    timer_id: str
    fire_at: datetime


@dataclass(frozen=True, slots=True)
class ParentNotice:
    """A child's run ended (or never started): an input for its parent's next decision."""

    parent_workflow_id: str
    outcome: ChildOutcome
    #: The sequence of the child's terminal event (None for a start that was refused).
    end_sequence: int | None = None


@dataclass(frozen=True, slots=True)
class RedriveAnswer:
    """The answer to a redrive request the workflow took or refused (a RedriveOutcome)."""

    request: RedriveRequested
    done: bool
    reason: str


@dataclass
class Step:
    """Everything one decision appends or sends; empty when nothing changes."""

    workflow_id: str
    events: list[HistoryEvent] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    timers: list[TimerRequest] = field(default_factory=list)
    cancel_timers: list[str] = field(default_factory=list)
    children: list[tuple[str, StartWorkflow]] = field(default_factory=list)
    #: CancelWorkflow commands to send (children of a parent that ended, policy request_cancel).
    cancels: list[tuple[str, CancelWorkflow]] = field(default_factory=list)
    notices: list[ParentNotice] = field(default_factory=list)
    #: Set when this step created the workflow (its first event is WorkflowStarted).
    started: StartWorkflow | None = None
    status: Status | None = None
    diverged: bool = False
    #: Sequences of the timers started and already fired in this step (never sent to the ticker).
    fired_here: set[int] = field(default_factory=set)
    #: Inputs refused (`slotflow.issuers`): nothing of them is appended; the caller parks them.
    refused: list[Refusal] = field(default_factory=list)
    #: Parked activities retried in this step, with their run's next redrive number: their JobDue
    #: goes to the claimers again.
    reissues: list[tuple[ActivityScheduled, int]] = field(default_factory=list)
    #: Answers to the dlq's redrive requests this step took or refused.
    redrive_answers: list[RedriveAnswer] = field(default_factory=list)
    #: Activities abandoned in this step, by sequence, with why: their runs are to be cancelled
    #: (a CancelActivity each, and the orchestrator's record of it).
    activity_cancels: dict[int, tuple[ActivityScheduled, str]] = field(default_factory=dict)


@dataclass
class _Book:
    """The history so far, its open work (`slotflow.history.OpenWork`), and what only the
    orchestrator's row adds: a purged history, the chain's execution deadline."""

    workflow_id: str
    history: list[HistoryEvent]
    work: OpenWork = field(init=False)
    #: When the chain's execution timeout passes, if its start set one (its timer fires then, and
    #: is cancelled when the run ends).
    execution_deadline: datetime | None = None
    #: Closed, and its history purged from the table (the row says so; the topic keeps it).
    purged: bool = False

    def __post_init__(self) -> None:
        self.work = OpenWork.of(self.history)

    @property
    def chain_deadline(self) -> bool:
        return self.execution_deadline is not None

    @property
    def ended(self) -> bool:
        return self.work.ended or self.purged

    @property
    def next_sequence(self) -> int:
        return len(self.history) + 1

    def append(self, event: HistoryEvent, step: Step) -> None:
        self.history.append(event)
        step.events.append(event)
        self.work.see(event)


def step(
    workflow_id: str,
    row: Row | None,
    history: Sequence[HistoryEvent],
    inputs: Sequence[Input],
    *,
    workflow_code: WorkflowCode,
    now: datetime,
    redecide: bool = False,
    records: Mapping[str, RunRecord] | None = None,
    clock: datetime | None = None,
) -> Step:
    """Apply ``inputs`` to the workflow and let its code move on (see the module docstring).

    ``redecide`` runs the code even without a new event: a stuck workflow after a deploy.
    ``records`` are the claimer's records of the runs the inputs' activity outcomes name, by run
    id (an outcome without one is refused); ``clock`` is the database clock read after the inputs
    were recorded (``now`` when not given), which no timer firing may precede.
    """
    book = _Book(workflow_id, list(history))
    if row is not None and not book.history and row.status in CLOSED:
        # Its history rows were purged (retention.py): the row alone says it ended.
        book.purged = True
    book.execution_deadline = row.execution_deadline if row is not None else None
    out = Step(workflow_id)
    trust = _Trust(records or {}, max(now, clock) if clock is not None else now)
    for item in inputs:
        _apply(book, item, out, workflow_code=workflow_code, now=now, trust=trust)
    if book.history and not book.ended and (out.events or redecide):
        _run_code(book, out, workflow_code=workflow_code, now=now, redecide=redecide)
    if out.events or out.started is not None:
        out.status = _status(book)
    if book.ended and out.events:
        _close_run(book, out)
    return out


def _close_run(book: _Book, out: Step) -> None:
    """The run ended in this step: its timers are cancelled, its parent hears of it, its children
    get their policy."""
    out.cancel_timers.extend(_timers_to_cancel(book))
    _abandon_activities(book, out, _end_reason(book))
    _closing(book, out)


def _end_reason(book: _Book) -> str:
    """Why the run's pending activities are abandoned, as the claimer records it."""
    return end_reason(book.workflow_id, book.work.end)


def end_reason(wf: str, end: HistoryEvent | None) -> str:
    """Why a run that ended with ``end`` abandoned its pending activities."""
    if isinstance(end, WorkflowCancelled):
        return f"workflow {wf} was cancelled" + (f": {end.reason}" if end.reason else "")
    if isinstance(end, WorkflowFailed):
        if end.error_type == TERMINATED:
            return f"workflow {wf} was terminated: {end.message}"
        if end.error_type == TIMED_OUT:
            return f"workflow {wf} timed out: {end.message}"
        return f"workflow {wf} failed ({end.error_type})"
    return f"workflow {wf} completed without waiting for it"


def _abandon_activities(book: _Book, out: Step, reason: str, sequences: Sequence[int] | None = None) -> None:
    """Ask the claimers to cancel the runs of the pending activities at ``sequences`` (every
    pending one when None); a parked one's run is dead-lettered already, nothing runs."""
    pending = book.work.activities
    for sequence in list(pending) if sequences is None else list(sequences):
        activity = pending.get(sequence)
        if activity is not None and sequence not in book.work.parked:
            out.activity_cancels.setdefault(sequence, (activity, reason))


def _closing(book: _Book, out: Step) -> None:
    for child in book.work.children.values():
        if child.parent_close_policy == "request_cancel":
            reason = f"parent {book.workflow_id} ended"
            cancel = CancelWorkflow(workflow_id=child.child_workflow_id, reason=reason)
            out.cancels.append((f"{book.workflow_id}#{child.sequence}/cancel-child", cancel))
    notice = parent_notice(book.workflow_id, book.work)
    if notice is not None:
        out.notices.append(notice)


def abandoned_by_ended_runs(
    workflow_id: str, history: Sequence[HistoryEvent]
) -> list[tuple[ActivityScheduled, str, HistoryEvent]]:
    """The activities each ended run of ``history`` left pending, with why and the event that ended
    the run (its end, or the continue-as-new): the ones its decisions asked the claimers to cancel,
    derived again by a rebuild. A parked activity's run is dead-lettered already: not listed."""
    out: list[tuple[ActivityScheduled, str, HistoryEvent]] = []
    work = OpenWork()
    previous: HistoryEvent | None = None
    for event in history:
        if isinstance(event, WorkflowStarted) and work.run is not None:
            # A new run in the same history: the id reused after the run ended, or a continue-as-new.
            ending: HistoryEvent | None = work.end
            reason = end_reason(workflow_id, work.end)
            if ending is None and isinstance(previous, WorkflowContinuedAsNew):
                ending, reason = previous, f"workflow {workflow_id} continued as new"
            if ending is not None:
                out.extend((a, reason, ending) for s, a in work.activities.items() if s not in work.parked)
        work.see(event)
        previous = event
    if work.end is not None:
        reason = end_reason(workflow_id, work.end)
        out.extend((a, reason, work.end) for s, a in work.activities.items() if s not in work.parked)
    return out


def parent_notice(workflow_id: str, work: OpenWork) -> ParentNotice | None:
    """What the parent of ``work``'s current run hears of its end (None while it runs, or when it
    has no parent): the decision that ends a child's run stages it, and a rebuild derives it again
    from the child's history."""
    end = work.end
    run = work.run
    if end is None or run is None or run.parent_workflow_id is None or run.parent_sequence is None:
        return None
    if isinstance(end, WorkflowCompleted):
        outcome = ChildOutcome(
            parent_workflow_id=run.parent_workflow_id,
            parent_sequence=run.parent_sequence,
            child_workflow_id=workflow_id,
            outcome="completed",
            result=end.result,
        )
    elif isinstance(end, WorkflowCancelled):
        outcome = ChildOutcome(
            parent_workflow_id=run.parent_workflow_id,
            parent_sequence=run.parent_sequence,
            child_workflow_id=workflow_id,
            outcome="cancelled",
            error_type="WorkflowCancelled",
            message=end.reason,
        )
    elif isinstance(end, WorkflowFailed):
        outcome = ChildOutcome(
            parent_workflow_id=run.parent_workflow_id,
            parent_sequence=run.parent_sequence,
            child_workflow_id=workflow_id,
            outcome="failed",
            error_type=end.error_type,
            message=end.message,
        )
    else:
        return None
    return ParentNotice(run.parent_workflow_id, outcome, end.sequence)


def _status(book: _Book) -> Status:
    if book.ended:
        last = book.work.end
        if isinstance(last, WorkflowCompleted):
            return "completed"
        return "cancelled" if isinstance(last, WorkflowCancelled) else "failed"
    return "stuck" if book.work.diverged else "running"


def _timers_to_cancel(book: _Book) -> list[str]:
    ids = [t.timer_id for t in book.work.timers.values()]
    if book.chain_deadline:
        ids.append(execution_timer_id(book.workflow_id, book.work.chain_start))
    return ids


@dataclass(frozen=True, slots=True)
class _Trust:
    """What an outcome is checked against: the claimer's records and the database clock."""

    records: Mapping[str, RunRecord]
    clock: datetime


def _apply(
    book: _Book, item: Input, out: Step, *, workflow_code: WorkflowCode, now: datetime, trust: _Trust
) -> None:
    message = item.message
    command_id = item.envelope.id
    wf = book.workflow_id
    exists = bool(book.history) or book.purged
    if isinstance(message, StartWorkflow):
        if book.purged:
            # A new run continues the history after its last sequence, which only the topic still
            # holds: every policy refuses (the id stays taken, docs/orchestrator.md "Retention").
            reason = f"workflow {wf} already exists (closed, history purged); id_reuse_policy is {message.id_reuse_policy}"
            _refuse_start(item, message, reason, out)
            return
        # Checked first: an open run is never terminated for a start that cannot happen.
        if not workflow_code.knows(message.workflow_type):
            _refuse_start(item, message, f"unknown workflow type {message.workflow_type!r}", out)
            return
        if exists:
            refusal = _reuse_refusal(book, message)
            if refusal is not None:
                _refuse_start(item, message, refusal, out)
                return
            if not book.ended:
                reason = f"terminated by StartWorkflow {command_id} (id_reuse_policy terminate_running)"
                book.append(_terminal_failure(book, TERMINATED, reason), out)
            if out.events and out.events[-1] is book.history[-1]:
                # The previous run ended in this very step: it closes before the next one starts.
                _close_run(book, out)
        book.append(
            WorkflowStarted(
                workflow_id=wf,
                sequence=book.next_sequence,
                reused_after=book.next_sequence - 1 if exists else None,
                workflow_type=message.workflow_type,
                input=message.input,
                command_id=command_id,
                parent_workflow_id=message.parent_workflow_id,
                parent_sequence=message.parent_sequence if message.parent_workflow_id is not None else None,
                parent_close_policy=message.parent_close_policy,
                execution_deadline=(
                    now + message.execution_timeout if message.execution_timeout is not None else None
                ),
                memo=message.memo,
                search_attributes=message.search_attributes,
            ),
            out,
        )
        out.started = message
        book.execution_deadline = (
            now + message.execution_timeout if message.execution_timeout is not None else None
        )
        if message.execution_timeout is not None:
            timer_id = execution_timer_id(wf, book.work.chain_start)
            out.timers.append(TimerRequest(timer_id, now + message.execution_timeout))
        out.acks.append(_accepted(item))
    elif isinstance(message, SignalWorkflow | CancelWorkflow | TerminateWorkflow):
        if not exists:
            out.acks.append(_rejected(item, f"workflow {wf} is not known"))
            return
        other_run = _other_run(book, message.start_command_id)
        if other_run is not None:
            out.acks.append(_rejected(item, other_run))
            return
        if book.ended:
            out.acks.append(_rejected(item, f"workflow {wf} has already ended"))
            return
        if isinstance(message, SignalWorkflow):
            run = book.work.run
            refusal = (
                workflow_code.signal_refusal(run.workflow_type, message.signal, message.payload)
                if run is not None
                else None
            )
            if refusal is not None:
                # Never reaches the run: a payload its handler cannot take would fail the workflow.
                out.acks.append(_rejected(item, f"signal {message.signal!r} to workflow {wf}: {refusal}"))
                return
            event: HistoryEvent = SignalReceived(
                workflow_id=wf,
                sequence=book.next_sequence,
                signal=message.signal,
                payload=message.payload,
                command_id=command_id,
            )
        elif isinstance(message, CancelWorkflow):
            event = CancelRequested(
                workflow_id=wf, sequence=book.next_sequence, reason=message.reason, command_id=command_id
            )
        else:
            event = _terminal_failure(book, TERMINATED, message.reason or "terminated")
        book.append(event, out)
        out.acks.append(_accepted(item))
    elif isinstance(message, RetryActivity | RedriveRequested):
        _retry(book, item, message, out, trust, exists=exists)
    elif book.history and not book.ended:
        _outcome(book, item, out, trust)
    elif isinstance(message, RunCompleted | RunDeadLettered | TimerFired):
        _unanswered(book, item, out, trust)  # the workflow ended, or never was


def _other_run(book: _Book, start_command_id: str | None) -> str | None:
    """Why a command meant for the run that ``start_command_id`` began cannot reach the workflow's
    current run (another start began it: the id was reused), or None."""
    if start_command_id is None or not book.history:
        return None  # any run; or a purged history, whose row says it ended
    chain = book.history[book.work.chain_start - 1]
    if not isinstance(chain, WorkflowStarted) or chain.command_id == start_command_id:
        return None
    return (
        f"workflow {book.workflow_id}'s current run was started by command {chain.command_id!r}, not "
        f"{start_command_id!r}: the run that command began has ended and the id was reused (or it began none)"
    )


def _retry(
    book: _Book,
    item: Input,
    message: RetryActivity | RedriveRequested,
    out: Step,
    trust: _Trust,
    *,
    exists: bool,
) -> None:
    """Retry the parked activity an operator names, or refuse with the reason; answer either way."""
    sequence = message.sequence or 0
    refusal = _retry_refusal(book, sequence, trust, exists=exists)
    done = ""
    if refusal is None:
        activity = book.work.activities[sequence]
        record = trust.records[activity.run_id]
        redrive = record.redrive_count + 1
        asked_by = message.command_id if isinstance(message, RedriveRequested) else item.envelope.id
        book.append(
            ActivityRetried(
                workflow_id=book.workflow_id,
                sequence=book.next_sequence,
                scheduled_sequence=sequence,
                redrive=redrive,
                command_id=asked_by[:1000],
            ),
            out,
        )
        out.reissues.append((activity, redrive))
        done = f"retried activity {activity.activity} #{sequence} of workflow {book.workflow_id} (redrive {redrive})"
    if isinstance(message, RedriveRequested):
        if refusal is None:
            out.redrive_answers.append(RedriveAnswer(message, True, done))
        else:
            out.redrive_answers.append(RedriveAnswer(message, False, refusal))
    elif refusal is None:
        out.acks.append(_accepted(item))
    else:
        out.acks.append(_rejected(item, refusal))


def _retry_refusal(book: _Book, sequence: int, trust: _Trust, *, exists: bool) -> str | None:
    """Why the activity at ``sequence`` cannot be retried now, or None when it can: the workflow
    still waits on that exact activity, it is parked, and the claimer's run is dead-lettered."""
    wf = book.workflow_id
    if not exists:
        return f"workflow {wf} is not known"
    if book.purged:
        return f"workflow {wf} is closed (its history purged after its retention)"
    scheduled = next(
        (e for e in book.history if isinstance(e, ActivityScheduled) and e.sequence == sequence), None
    )
    if scheduled is None:
        return f"workflow {wf} has no activity at #{sequence}"
    name = f"{scheduled.activity} #{sequence}"
    ended = next(
        (
            e
            for e in book.history
            if isinstance(e, ActivityCompleted | ActivityFailed) and e.scheduled_sequence == sequence
        ),
        None,
    )
    after = ended.sequence if ended is not None else sequence
    compensations = [
        e
        for e in book.history
        if isinstance(e, ActivityScheduled) and e.compensates is not None and e.sequence > after
    ]
    if ended is not None and compensations:
        ran = ", ".join(f"{c.activity} at #{c.sequence}" for c in compensations)
        how = "completed" if isinstance(ended, ActivityCompleted) else "failed"
        return f"{wf} already compensated this step: {name} {how} at #{ended.sequence}, then {ran} ran"
    if book.ended:
        state = _status(book)
        return f"workflow {wf} is closed ({state}): it no longer waits on {name}"
    if ended is not None or sequence not in book.work.activities:
        how = "completed" if isinstance(ended, ActivityCompleted) else "failed"
        at = f" at #{ended.sequence}" if ended is not None else ""
        return f"workflow {wf} no longer waits on {name}: it {how}{at}"
    if sequence not in book.work.parked:
        return f"{name} of workflow {wf} is not parked: its run is still being tried (or was retried already)"
    record = trust.records.get(scheduled.run_id)
    if record is None:
        return f"the claimer holds no run {scheduled.run_id} (purged, or never claimed)"
    if record.state != "dead_lettered":
        return f"the claimer's run {scheduled.run_id} is {record.state}, not dead-lettered"
    return None


def _refuse_start(item: Input, message: StartWorkflow, reason: str, out: Step) -> None:
    out.acks.append(_rejected(item, reason))
    if message.parent_workflow_id is not None and message.parent_sequence is not None:
        outcome = ChildOutcome(
            parent_workflow_id=message.parent_workflow_id,
            parent_sequence=message.parent_sequence,
            child_workflow_id=message.workflow_id,
            outcome="failed",
            error_type=CHILD_NOT_STARTED,
            message=reason,
        )
        out.notices.append(ParentNotice(message.parent_workflow_id, outcome))


def _outcome(book: _Book, item: Input, out: Step, trust: _Trust) -> None:
    """An activity's, child's or timer's outcome, if it answers something still pending."""
    message = item.message
    if isinstance(message, RunCompleted | RunDeadLettered):
        _activity_outcome(book, item, message, out, trust)
    elif isinstance(message, TimerFired):
        _timer_fired(book, item, message, out, trust)
    elif isinstance(message, ChildOutcome) and message.parent_sequence in book.work.children:
        # Written by the child's own decision into this schema: the orchestrator's own record.
        wf = book.workflow_id
        child = book.work.children[message.parent_sequence]
        if message.outcome == "completed":
            event: HistoryEvent = ChildWorkflowCompleted(
                workflow_id=wf,
                sequence=book.next_sequence,
                initiated_sequence=child.sequence,
                child_workflow_id=child.child_workflow_id,
                result=message.result,
            )
        else:
            event = ChildWorkflowFailed(
                workflow_id=wf,
                sequence=book.next_sequence,
                initiated_sequence=child.sequence,
                child_workflow_id=child.child_workflow_id,
                error_type=message.error_type or "ChildWorkflowFailed",
                message=message.message[:10_000],
                cancelled=message.outcome == "cancelled",
            )
        book.append(event, out)


def _activity_outcome(
    book: _Book, item: Input, message: RunCompleted | RunDeadLettered, out: Step, trust: _Trust
) -> None:
    """The pending activity's end, as the claimer recorded it; refused unless the claimer's record
    of the pending activity's run backs the event (`slotflow.issuers.outcome_verdict`)."""
    wf = book.workflow_id
    answered = book.work.activities.get(message.sequence) if message.sequence is not None else None
    if answered is None:
        _unanswered(book, item, out, trust)  # nothing pending at that sequence
        return
    record = trust.records.get(answered.run_id)
    verdict = outcome_verdict(message, run_id=answered.run_id, handler=answered.activity, record=record)
    if not verdict.accepted or record is None:
        out.refused.append(Refusal(item, verdict))
        return
    parks = isinstance(message, RunDeadLettered) and answered.on_dead_letter == "park"
    if answered.schedule_to_close_deadline is not None and not parks:
        out.cancel_timers.append(deadline_timer_id(answered.run_id))
    if isinstance(message, RunCompleted):
        book.append(
            ActivityCompleted(
                workflow_id=wf,
                sequence=book.next_sequence,
                scheduled_sequence=answered.sequence,
                result=record.result,
            ),
            out,
        )
        return
    reason, error_type, text = record.failure()
    if parks:
        # The step shows failed with the DLQ reason and stays pending: the outcome of a redrive
        # of the parked run is its outcome (the run's next dead-letter parks it again).
        book.append(
            ActivityParked(
                workflow_id=wf,
                sequence=book.next_sequence,
                scheduled_sequence=answered.sequence,
                reason=reason,
                error_type=error_type[:400],
                message=text[:10_000],
            ),
            out,
        )
        return
    book.append(
        ActivityFailed(
            workflow_id=wf,
            sequence=book.next_sequence,
            scheduled_sequence=answered.sequence,
            error_type=error_type[:400],
            message=text[:10_000],
            permanent=reason == "permanent_error",
        ),
        out,
    )


def _timer_fired(book: _Book, item: Input, message: TimerFired, out: Step, trust: _Trust) -> None:
    """A firing of a timer the workflow started and still waits on, once it is due; refused when
    it names something pending but is not that timer or comes early (`slotflow.issuers`)."""
    wf = book.workflow_id
    work = book.work
    chain_timer = execution_timer_id(wf, work.chain_start)
    sleep = work.timers.get(message.sequence) if message.sequence is not None else None
    activity = work.activities.get(message.sequence) if message.sequence is not None else None
    if message.timer_id == chain_timer:
        verdict = timer_verdict(
            message.timer_id,
            awaited=f"the execution timeout of workflow {wf}",
            awaited_id=chain_timer if book.execution_deadline is not None else None,
            fire_at=book.execution_deadline,
            clock=trust.clock,
        )
        if verdict.accepted:
            book.append(_terminal_failure(book, TIMED_OUT, "the execution timeout passed"), out)
    elif sleep is not None:
        verdict = timer_verdict(
            message.timer_id,
            awaited=f"the timer started at sequence {sleep.sequence} of workflow {wf}",
            awaited_id=sleep.timer_id,
            fire_at=sleep.fire_at,
            clock=trust.clock,
        )
        if verdict.accepted:
            book.append(
                WorkflowTimerFired(
                    workflow_id=wf,
                    sequence=book.next_sequence,
                    started_sequence=sleep.sequence,
                    timer_id=sleep.timer_id,
                    fired_at=message.fired_at,
                ),
                out,
            )
    elif activity is not None:
        deadline = activity.schedule_to_close_deadline
        verdict = timer_verdict(
            message.timer_id,
            awaited=f"the schedule-to-close deadline of activity {activity.activity} (run {activity.run_id})",
            awaited_id=deadline_timer_id(activity.run_id) if deadline is not None else None,
            fire_at=deadline,
            clock=trust.clock,
        )
        if verdict.accepted:
            book.append(
                ActivityFailed(
                    workflow_id=wf,
                    sequence=book.next_sequence,
                    scheduled_sequence=activity.sequence,
                    error_type=ACTIVITY_TIMED_OUT,
                    message=f"no attempt of {activity.activity} finished by its schedule-to-close deadline",
                    permanent=True,
                ),
                out,
            )
            # Its outcome no longer counts: an attempt still running is stopped, a retry never
            # starts (Temporal cancels the attempt at its next heartbeat; here the claimer cancels
            # it at its next lease renewal or heartbeat write).
            reason = f"activity {activity.activity} passed its schedule-to-close deadline"
            out.activity_cancels.setdefault(activity.sequence, (activity, reason))
    else:
        _unanswered(book, item, out, trust)  # names nothing pending
        return
    if not verdict.accepted:
        out.refused.append(Refusal(item, verdict))


def _unanswered(book: _Book, item: Input, out: Step, trust: _Trust) -> None:
    """An outcome or firing that answers nothing pending: late, a copy, or forged. It changes
    nothing either way; it is dropped when its issuer's record backs it (a genuine copy: the
    claimer's row of that activity's run as it claims, or a timer this workflow started and whose
    time has come) and refused otherwise, so a forged record is parked where an operator sees it
    instead of disappearing without a trace."""
    message = item.message
    if isinstance(message, RunCompleted | RunDeadLettered):
        verdict = _unanswered_outcome(book, message, trust)
    elif isinstance(message, TimerFired):
        verdict = _unanswered_firing(book, message, trust)
    else:
        return
    if not verdict.accepted:
        out.refused.append(Refusal(item, verdict))


def _unanswered_outcome(book: _Book, message: RunCompleted | RunDeadLettered, trust: _Trust) -> Verdict:
    """Whether the claimer's record backs an outcome of the activity the history scheduled at the
    outcome's sequence (answered already, or abandoned when the workflow ended)."""
    scheduled = next(
        (e for e in book.history if isinstance(e, ActivityScheduled) and e.sequence == message.sequence),
        None,
    )
    if scheduled is None:
        return Verdict(
            UNPROVEN_OUTCOME,
            "run_id",
            f"{message.message_type} of run {message.run_id[:200]!r} names sequence {message.sequence} of "
            f"workflow {book.workflow_id}, where no activity was scheduled",
        )
    record = trust.records.get(scheduled.run_id)
    return outcome_verdict(message, run_id=scheduled.run_id, handler=scheduled.activity, record=record)


def _unanswered_firing(book: _Book, message: TimerFired, trust: _Trust) -> Verdict:
    """Whether the history started the timer a firing names, at its sequence (a sleep, an
    activity's deadline) or as the execution timeout, and its time has come."""
    wf = book.workflow_id
    if message.sequence is None:
        return timer_verdict(
            message.timer_id,
            awaited=f"the execution timeout of workflow {wf}",
            awaited_id=execution_timer_id(wf, book.work.chain_start) if book.execution_deadline else None,
            fire_at=book.execution_deadline,
            clock=trust.clock,
        )
    started = next((e for e in book.history if e.sequence == message.sequence), None)
    if isinstance(started, TimerStarted):
        return timer_verdict(
            message.timer_id,
            awaited=f"the timer started at sequence {started.sequence} of workflow {wf}",
            awaited_id=started.timer_id,
            fire_at=started.fire_at,
            clock=trust.clock,
        )
    deadline = started.schedule_to_close_deadline if isinstance(started, ActivityScheduled) else None
    return timer_verdict(
        message.timer_id,
        awaited=f"sequence {message.sequence} of workflow {wf}",
        awaited_id=deadline_timer_id(started.run_id)
        if isinstance(started, ActivityScheduled) and deadline
        else None,
        fire_at=deadline,
        clock=trust.clock,
    )


def _run_code(
    book: _Book, out: Step, *, workflow_code: WorkflowCode, now: datetime, redecide: bool = False
) -> None:
    if not _replay_code(book, out, workflow_code=workflow_code, now=now, redecide=redecide):
        return
    for _ in range(MAX_RUNS_PER_DECISION):
        last = book.history[-1]
        if not isinstance(last, WorkflowContinuedAsNew) or book.work.run is None:
            return
        # The next run starts in the same history, right after the event that ended this one,
        # with the same parent; the runtime replays only from the newest WorkflowStarted. What the
        # run left pending is answered no more.
        _abandon_activities(book, out, f"workflow {book.workflow_id} continued as new")
        run = book.work.run
        book.append(
            WorkflowStarted(
                workflow_id=book.workflow_id,
                sequence=book.next_sequence,
                workflow_type=last.workflow_type,
                input=last.input,
                command_id=run.command_id,
                continued_from=last.sequence,
                parent_workflow_id=run.parent_workflow_id,
                parent_sequence=run.parent_sequence,
                parent_close_policy=run.parent_close_policy,
                # The chain's memo and search attributes as this run left them (Temporal's
                # continue-as-new carries both on).
                memo=current_memo(book.history),
                search_attributes=current_search_attributes(book.history),
            ),
            out,
        )
        if not _replay_code(book, out, workflow_code=workflow_code, now=now):
            return


def _replay_code(
    book: _Book, out: Step, *, workflow_code: WorkflowCode, now: datetime, redecide: bool = False
) -> bool:
    """Let the code move on; a timer it started that is already due (a zero-length sleep) fires
    here and the code moves on again, up to `MAX_DUE_TIMERS_PER_DECISION` times. False when the
    replay diverged."""
    fired = 0
    while True:
        try:
            moves = workflow_code.replay(tuple(book.history), now=now)
        except Diverged as err:
            _diverged(book, out, err)
            return False
        _take(book, moves, out)
        if redecide and moves.abandoned_earlier:
            # Deciding anew (a rebuild, a stuck workflow's new code): the cancels of what the code
            # abandoned before are asked again. The orchestrator's record keeps its first request,
            # and a claimer takes a cancel's id once.
            reason = f"workflow {book.workflow_id} cancelled the activity"
            _abandon_activities(book, out, reason, moves.abandoned_earlier)
        if book.ended or fired >= MAX_DUE_TIMERS_PER_DECISION or not _fire_due(book, out, now):
            return True
        fired += 1


def _fire_due(book: _Book, out: Step, now: datetime) -> bool:
    """Fire the timers started in this step whose time has come by the decision's clock (only a
    zero-length one: any other ends after `now`). Recorded as any firing is, so a replay sees the
    same history; the ticker never hears of them (`Step.fired_here`)."""
    started_here = {e.sequence for e in out.events if isinstance(e, TimerStarted)}
    due = [t for t in book.work.timers.values() if t.sequence in started_here and t.fire_at <= now]
    for timer in due:
        book.append(
            WorkflowTimerFired(
                workflow_id=book.workflow_id,
                sequence=book.next_sequence,
                started_sequence=timer.sequence,
                timer_id=timer.timer_id,
                fired_at=now,
            ),
            out,
        )
        out.fired_here.add(timer.sequence)
    return bool(due)


def _diverged(book: _Book, out: Step, err: Diverged) -> None:
    last = book.history[-1]
    repeated = (
        isinstance(last, NonDeterminismDetected) and last.at_sequence == err.sequence and not out.events
    )
    if not repeated:
        book.append(
            NonDeterminismDetected(
                workflow_id=book.workflow_id,
                sequence=book.next_sequence,
                at_sequence=err.sequence,
                expected=err.expected[:2000],
                got=err.got[:2000],
            ),
            out,
        )
    out.diverged = True


def _take(book: _Book, moves: Moves, out: Step) -> None:
    """The runtime's events, after checking they continue the history (else nothing is kept)."""
    expected = book.next_sequence
    for offset, event in enumerate(moves.events):
        if event.workflow_id != book.workflow_id or event.sequence != expected + offset:
            raise BrokenDecision(
                f"runtime returned {event.message_type} #{event.sequence} of {event.workflow_id}; "
                f"expected #{expected + offset} of {book.workflow_id}"
            )
    for event in moves.events:
        if book.ended:
            raise BrokenDecision(f"runtime appended {event.message_type} after the end of {book.workflow_id}")
        book.append(event, out)
    out.cancel_timers.extend(moves.cancel_timers)
    out.children.extend(moves.children)
    if moves.cancel_activities:
        # The code stopped waiting for them: because its run was cancelled (or ended otherwise) in
        # these very moves, which says why, or on its own (`task.cancel()`).
        ended = book.work.end if book.ended else None
        reason = (
            _end_reason(book)
            if ended is not None and not isinstance(ended, WorkflowCompleted)
            else f"workflow {book.workflow_id} cancelled the activity"
        )
        _abandon_activities(book, out, reason, moves.cancel_activities)


def _terminal_failure(book: _Book, error_type: str, message: str) -> WorkflowFailed:
    return WorkflowFailed(
        workflow_id=book.workflow_id,
        sequence=book.next_sequence,
        error_type=error_type,
        message=message[:10_000],
        compensated=False,
    )


def _reuse_refusal(book: _Book, message: StartWorkflow) -> str | None:
    """Why a StartWorkflow for a taken id is refused under its `id_reuse_policy`, or None when it
    starts a new run (after terminating the open one, for `terminate_running`)."""
    wf = book.workflow_id
    state = "closed" if book.ended else ("stuck" if book.work.diverged else "running")
    if message.id_reuse_policy == "reject_duplicate":
        return f"workflow {wf} already exists ({state}); id_reuse_policy is reject_duplicate"
    if message.id_reuse_policy == "allow_after_close" and not book.ended:
        return f"workflow {wf} is still open ({state}); id_reuse_policy allow_after_close starts a new run only once it closed"
    return None


def _accepted(item: Input) -> Ack:
    return Ack(item.envelope.id, item.envelope.type, _subject(item))


def _rejected(item: Input, reason: str) -> Ack:
    return Ack(item.envelope.id, item.envelope.type, _subject(item), reason)


def _subject(item: Input) -> str:
    workflow_id = getattr(item.message, "workflow_id", None)
    return workflow_id if isinstance(workflow_id, str) else item.envelope.key
