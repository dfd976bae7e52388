"""A workflow's state, derived from its typed history (docs/workflows-history.md).

`fold` is a pure function of the set of history events: it reads them in sequence order, so the
same history gives the same state however often and in whatever batches its events arrived, and a
rebuild from the topic gives the same row.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
    CompensationRegistered,
    HistoryEvent,
    MemoUpserted,
    NonDeterminismDetected,
    SearchAttributesUpserted,
    SignalReceived,
    TimerCancelled,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.contracts.search import dump_search_attributes, merged
from slotflow.contracts.workflows import WORKFLOW_TERMINATED

#: Statuses the history gives a workflow ("requested" and "rejected" are the api's own: a StartWorkflow
#: seen and no history yet, or its start refused). `terminated`: a WorkflowFailed that a
#: TerminateWorkflow appended (error type `WorkflowTerminated`), the code and its compensations unrun.
STATUSES = ("running", "compensating", "completed", "failed", "terminated", "cancelled", "stuck")
TERMINAL_STATUSES = frozenset({"completed", "failed", "terminated", "cancelled"})


@dataclass(frozen=True, slots=True)
class Recorded:
    """One history event and when it was recorded (its envelope's occurred_at)."""

    event: HistoryEvent
    at: datetime


@dataclass
class WorkflowState:
    """What the read model shows of a workflow, as JSON-ready values."""

    status: str = "running"
    current_step: str | None = None
    last_sequence: int = 0
    #: The first missing sequence when later events are already there (they wait for it).
    gap_at: int | None = None
    workflow_type: str | None = None
    input: dict[str, Any] | None = None
    command_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    updated_at: datetime | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    compensated: bool | None = None
    cancel_requested: bool = False
    cancel_reason: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    timers: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    children: list[dict[str, Any]] = field(default_factory=list)
    #: In the order they run on failure or cancel: newest registration first.
    compensations: list[dict[str, Any]] = field(default_factory=list)
    non_determinism: dict[str, Any] | None = None
    #: What an open, running workflow waits on when only a signal can move it: `{"on": "signal",
    #: "signal": its name or None, "since": ..., "timer_id"/"until": the wait's timeout or None}`.
    #: A timed `wait_signal` names its signal (its timer says which); an untimed wait does not
    #: (nothing pending but the signal; the history cannot say which one).
    waiting: dict[str, Any] | None = None
    #: Events that break the contract (a result for no scheduled activity, events after the end).
    anomalies: list[str] = field(default_factory=list)
    #: The start's memo (a continued run carries its chain's on).
    memo: dict[str, Any] = field(default_factory=dict)
    #: The run's search attributes in their typed JSON form (`{"Stage": {"type": "keyword",
    #: "value": "paid"}}`): the start's, then each upsert in order; what the read model indexes.
    search_attributes: dict[str, Any] = field(default_factory=dict)
    #: Runs started by a StartWorkflow under this id (a reuse after close starts another; a
    #: continue-as-new does not count): the state above is the newest run's.
    runs: int = 1

    @property
    def pending_activities(self) -> list[dict[str, Any]]:
        return [step for step in self.steps if step["state"] in ("scheduled", "parked")]

    @property
    def pending_timers(self) -> list[dict[str, Any]]:
        return [timer for timer in self.timers if timer["status"] == "pending"]

    @property
    def pending_children(self) -> list[dict[str, Any]]:
        return [child for child in self.children if child["status"] == "pending"]

    def derived(self) -> dict[str, Any]:
        """The lists and details stored beside the scalar columns (JSON-ready)."""
        return {
            "gap_at": self.gap_at,
            "command_id": self.command_id,
            "result": self.result,
            "error": self.error,
            "compensated": self.compensated,
            "steps": self.steps,
            "timers": self.timers,
            "signals": self.signals,
            "children": self.children,
            "compensations": self.compensations,
            "non_determinism": self.non_determinism,
            "waiting": self.waiting,
            "anomalies": self.anomalies,
            "runs": self.runs,
        }


def _iso(at: datetime) -> str:
    return at.isoformat()


def contiguous(events: list[Recorded]) -> tuple[list[Recorded], int | None]:
    """Events 1..k in order, one per sequence (the first wins), and the first missing sequence if
    later ones exist."""
    by_sequence: dict[int, Recorded] = {}
    for recorded in events:
        by_sequence.setdefault(recorded.event.sequence, recorded)
    prefix: list[Recorded] = []
    expected = 1
    while expected in by_sequence:
        prefix.append(by_sequence[expected])
        expected += 1
    gap = expected if any(seq > expected for seq in by_sequence) else None
    return prefix, gap


def run_history(events: list[Recorded], start_command_id: str) -> list[Recorded] | None:
    """The contiguous history from sequence 1 through the end of the run the StartWorkflow
    ``start_command_id`` began, so `fold` of it is that run's state; None when no run of this
    history began with that command (yet).

    A workflow id reused after its run closed holds several runs, and `fold` of the whole history
    shows the newest; this cuts the history where the next run (a `reused_after` start of another
    command) begins. A continue-as-new carries the command id on, so a chain of continued runs is
    the one run its start began, as a client's handle sees it (Temporal's handle follows runs too).
    """
    prefix, _ = contiguous(events)
    begun = False
    for index, recorded in enumerate(prefix):
        event = recorded.event
        if not isinstance(event, WorkflowStarted) or event.continued_from is not None:
            continue
        if begun:
            return prefix[:index]
        # Each command id begins at most one run: the orchestrator appends nothing for a second
        # StartWorkflow with the same command id.
        begun = event.command_id == start_command_id
    return prefix if begun else None


def fold(events: list[Recorded]) -> WorkflowState | None:
    """The state after the contiguous history from sequence 1; None while WorkflowStarted is missing."""
    prefix, gap = contiguous(events)
    if not prefix or not isinstance(prefix[0].event, WorkflowStarted):
        return None
    state = WorkflowState(gap_at=gap)
    steps: dict[int, dict[str, Any]] = {}
    timers: dict[int, dict[str, Any]] = {}
    children: dict[int, dict[str, Any]] = {}
    registered: dict[int, dict[str, Any]] = {}
    compensating = False
    terminal: str | None = None
    for recorded in prefix:
        event, at = recorded.event, recorded.at
        if terminal is not None and isinstance(event, WorkflowStarted) and event.reused_after is not None:
            # A new run of the closed id (its StartWorkflow's id_reuse_policy): the read model
            # shows the newest run; the earlier ones stay in the history.
            state = WorkflowState(gap_at=gap, anomalies=state.anomalies, runs=state.runs + 1)
            steps, timers, children, registered = {}, {}, {}, {}
            compensating, terminal = False, None
        state.last_sequence = event.sequence
        state.updated_at = at
        if terminal is not None:
            state.anomalies.append(f"#{event.sequence} {event.message_type} after the workflow ended")
            continue
        if not isinstance(event, NonDeterminismDetected) and state.non_determinism is not None:
            # The orchestrator moved on: code matching the history was deployed.
            state.non_determinism["open"] = False
        if isinstance(event, WorkflowStarted):
            if event.continued_from is not None:
                # The previous run continued as new: what it left pending is answered no more.
                _abandon(steps, timers, children)
            state.workflow_type, state.input, state.command_id = (
                event.workflow_type,
                event.input,
                event.command_id,
            )
            state.started_at = at
            # A continued run's start carries the chain's memo and attributes on (the orchestrator
            # copies them), so every start speaks for the run it begins.
            state.memo = dict(event.memo)
            state.search_attributes = dump_search_attributes(event.search_attributes)
        elif isinstance(event, SearchAttributesUpserted):
            for name, value in dump_search_attributes(event.search_attributes).items():
                if value is None:
                    state.search_attributes.pop(name, None)
                else:
                    state.search_attributes[name] = value
        elif isinstance(event, MemoUpserted):
            state.memo = merged(state.memo, event.memo)
        elif isinstance(event, ActivityScheduled):
            steps[event.sequence] = {
                "sequence": event.sequence,
                "activity": event.activity,
                "run_id": event.run_id,
                "compensation": event.compensation,
                "compensates": event.compensates,
                "state": "scheduled",
                "scheduled_at": _iso(at),
                "finished_at": None,
                "finished_sequence": None,
                "result": None,
                "error": None,
            }
            if event.compensates is not None:
                compensating = True
                entry = registered.get(event.compensates)
                if entry is None:
                    state.anomalies.append(
                        f"#{event.sequence} compensates #{event.compensates}, never registered"
                    )
                else:
                    entry.update(
                        state="running", scheduled_sequence=event.sequence, run_id=event.run_id, error=None
                    )
        elif isinstance(event, ActivityParked):
            step = steps.get(event.scheduled_sequence)
            if step is None or step["state"] not in ("scheduled", "parked"):
                state.anomalies.append(
                    f"#{event.sequence} {event.message_type} for #{event.scheduled_sequence}, not a pending activity"
                )
                continue
            # Failed with the DLQ reason, still pending: a redrive of the parked run finishes it.
            parked: dict[str, Any] = {
                "type": event.error_type,
                "message": event.message,
                "dead_letter_reason": event.reason,
            }
            step.update(state="parked", error=parked)
        elif isinstance(event, ActivityRetried):
            step = steps.get(event.scheduled_sequence)
            if step is None or step["state"] != "parked":
                state.anomalies.append(
                    f"#{event.sequence} {event.message_type} for #{event.scheduled_sequence}, not a parked activity"
                )
                continue
            # An operator retried it (RetryActivity, or its letter's redrive): pending again, its
            # outcome to come; the retries are counted for the step's page.
            step.update(state="scheduled", error=None, retries=int(step.get("retries", 0)) + 1)
        elif isinstance(event, ActivityCompleted | ActivityFailed):
            step = steps.get(event.scheduled_sequence)
            if step is None or step["state"] not in ("scheduled", "parked"):
                state.anomalies.append(
                    f"#{event.sequence} {event.message_type} for #{event.scheduled_sequence}, not a pending activity"
                )
                continue
            step.update(finished_at=_iso(at), finished_sequence=event.sequence)
            if isinstance(event, ActivityCompleted):
                step.update(state="completed", result=event.result, error=None)
            else:
                error = {"type": event.error_type, "message": event.message, "permanent": event.permanent}
                step.update(state="failed", error=error)
            if step["compensates"] is not None and step["compensates"] in registered:
                entry = registered[step["compensates"]]
                if entry.get("scheduled_sequence") == step["sequence"]:
                    entry["state"] = "done" if step["state"] == "completed" else "failed"
                    entry["error"] = step["error"]
        elif isinstance(event, TimerStarted):
            timers[event.sequence] = {
                "sequence": event.sequence,
                "timer_id": event.timer_id,
                "fire_at": _iso(event.fire_at),
                "started_at": _iso(at),
                "signal": event.signal,
                "status": "pending",
                "fired_at": None,
                "fired_sequence": None,
                "cancelled_sequence": None,
            }
        elif isinstance(event, WorkflowTimerFired):
            timer = timers.get(event.started_sequence)
            if timer is None or timer["status"] != "pending":
                state.anomalies.append(
                    f"#{event.sequence} fired #{event.started_sequence}, not a pending timer"
                )
                continue
            timer.update(status="fired", fired_at=_iso(event.fired_at), fired_sequence=event.sequence)
        elif isinstance(event, TimerCancelled):
            timer = timers.get(event.started_sequence)
            if timer is None or timer["status"] != "pending":
                state.anomalies.append(
                    f"#{event.sequence} cancelled #{event.started_sequence}, not a pending timer"
                )
                continue
            timer.update(status="cancelled", cancelled_sequence=event.sequence)
        elif isinstance(event, ChildWorkflowScheduled):
            children[event.sequence] = {
                "sequence": event.sequence,
                "child_workflow_id": event.child_workflow_id,
                "workflow_type": event.workflow_type,
                "parent_close_policy": event.parent_close_policy,
                "status": "pending",
                "scheduled_at": _iso(at),
                "finished_at": None,
                "finished_sequence": None,
                "result": None,
                "error": None,
            }
        elif isinstance(event, ChildWorkflowCompleted | ChildWorkflowFailed):
            child = children.get(event.initiated_sequence)
            if child is None or child["status"] != "pending":
                state.anomalies.append(
                    f"#{event.sequence} {event.message_type} for #{event.initiated_sequence}, not a pending child"
                )
                continue
            child.update(finished_at=_iso(at), finished_sequence=event.sequence)
            if isinstance(event, ChildWorkflowCompleted):
                child.update(status="completed", result=event.result)
            else:
                child.update(
                    status="cancelled" if event.cancelled else "failed",
                    error={"type": event.error_type, "message": event.message},
                )
        elif isinstance(event, SignalReceived):
            state.signals.append(
                {"sequence": event.sequence, "signal": event.signal, "payload": event.payload, "at": _iso(at)}
            )
        elif isinstance(event, CompensationRegistered):
            forward = steps.get(event.for_step)
            registered[event.for_step] = {
                "for_step": event.for_step,
                "step_activity": forward["activity"] if forward is not None else None,
                "activity": event.activity,
                "payload": event.payload,
                "registered_sequence": event.sequence,
                "registered_at": _iso(at),
                "state": "registered",
                "scheduled_sequence": None,
                "run_id": None,
                "error": None,
            }
            if forward is None or forward["state"] != "completed":
                state.anomalies.append(
                    f"#{event.sequence} registers a compensation for #{event.for_step}, not a completed step"
                )
        elif isinstance(event, CancelRequested):
            state.cancel_requested = True
            state.cancel_reason = state.cancel_reason or event.reason
        elif isinstance(event, WorkflowCompleted):
            terminal, state.result = "completed", event.result
        elif isinstance(event, WorkflowFailed):
            terminal = "terminated" if event.error_type == WORKFLOW_TERMINATED else "failed"
            state.compensated = event.compensated
            state.error = {"type": event.error_type, "message": event.message}
        elif isinstance(event, WorkflowCancelled):
            terminal, state.compensated = "cancelled", event.compensated
            state.cancel_reason = state.cancel_reason or event.reason or None
        elif isinstance(event, NonDeterminismDetected):
            state.non_determinism = {
                "sequence": event.sequence,
                "at_sequence": event.at_sequence,
                "expected": event.expected,
                "got": event.got,
                "at": _iso(at),
                "open": True,
            }
        if terminal is not None:
            state.ended_at = at
            # The orchestrator cancels every timer of a run that ended (at the ticker too).
            for timer in timers.values():
                if timer["status"] == "pending":
                    timer.update(status="cancelled", cancelled_sequence=event.sequence)
    state.steps = [steps[s] for s in sorted(steps)]
    state.timers = [timers[s] for s in sorted(timers)]
    state.children = [children[s] for s in sorted(children)]
    state.compensations = sorted(registered.values(), key=lambda c: -int(c["registered_sequence"]))
    open_divergence = state.non_determinism is not None and state.non_determinism["open"]
    if terminal is not None:
        state.status = terminal
    elif open_divergence:
        state.status = "stuck"
    else:
        state.status = "compensating" if compensating else "running"
        state.waiting = _waiting_for_signal(state, prefix[-1].at)
    state.current_step = None if terminal is not None else _current_step(state)
    return state


def _waiting_for_signal(state: WorkflowState, last_at: datetime) -> dict[str, Any] | None:
    """What the open run waits on, if only a signal can move it: nothing pending but the newest
    timer of a timed `wait_signal` (the signal is named), or nothing pending at all (unnamed)."""
    if state.pending_activities or state.pending_children:
        return None
    timers = state.pending_timers
    if not timers:
        return {"on": "signal", "signal": None, "since": _iso(last_at), "timer_id": None, "until": None}
    newest = timers[-1]
    if newest.get("signal") is None:
        return None  # a sleep, or a wait_condition's timeout: a timer will move it
    return {
        "on": "signal",
        "signal": newest["signal"],
        "since": newest["started_at"],
        "timer_id": newest["timer_id"],
        "until": newest["fire_at"],
    }


def _abandon(*pending_by_sequence: dict[int, dict[str, Any]]) -> None:
    """Mark the steps, timers and children a run left pending when it continued as new."""
    for entries in pending_by_sequence:
        for entry in entries.values():
            if entry.get("state") in ("scheduled", "parked"):
                entry["state"] = "abandoned"
            elif entry.get("status") == "pending":
                entry["status"] = "abandoned"


def _current_step(state: WorkflowState) -> str | None:
    pending = state.pending_activities
    if pending:
        return str(pending[-1]["activity"])
    if state.waiting is not None:
        signal = state.waiting["signal"]
        return f"signal {signal}" if signal is not None else "a signal"
    timers = state.pending_timers
    if timers:
        return f"timer {timers[-1]['timer_id']}"
    children = state.pending_children
    if children:
        return f"child {children[-1]['child_workflow_id']}"
    return str(state.steps[-1]["activity"]) if state.steps else None
