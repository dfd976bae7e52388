"""What a workflow's history leaves open: the current run and the work still waiting for an answer."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
    HistoryEvent,
    NonDeterminismDetected,
    TimerCancelled,
    TimerStarted,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.contracts.workflows import TERMINAL_EVENTS


@dataclass
class OpenWork:
    """The open work of a workflow's history, folded one event at a time.

    Build it from a history with `OpenWork.of(events)` and keep it current with `see(event)` for
    each event appended after them, in sequence order. It is pure: the same events give the same
    answer. The orchestrator decides with it (which outcome still counts, what to cancel when a
    run ends); the read model's `fold` reports the same pending work of the current run.

    Rules:

    - A `WorkflowStarted` begins a new **run** (sequence 1, a continue-as-new's `continued_from`,
      or a reused id's `reused_after`): `run` is it, `ended` is cleared, and whatever the previous
      run left pending is dropped, since no outcome of it is answered any more.
    - **activities**: each `ActivityScheduled` by its sequence, until its `ActivityCompleted` or
      `ActivityFailed` (`scheduled_sequence`). An `ActivityParked` leaves it pending: a retry's
      outcome is still its outcome.
    - **parked**: the pending activities whose run the claimers gave up on (`ActivityParked`), until
      an operator retries one (`ActivityRetried`) or its outcome comes: what a RetryActivity may
      retry.
    - **timers**: each `TimerStarted` by its sequence, until its `WorkflowTimerFired` or
      `TimerCancelled` (`started_sequence`).
    - **children**: each `ChildWorkflowScheduled` by its sequence, until its
      `ChildWorkflowCompleted` or `ChildWorkflowFailed` (`initiated_sequence`).
    - **ended**: after `WorkflowCompleted`, `WorkflowFailed` or `WorkflowCancelled` (`end` is
      that event); what was pending then stays listed (a closing parent's children get their
      `parent_close_policy` from it). A `WorkflowContinuedAsNew` does not end the workflow: the
      next run's `WorkflowStarted` follows it.
    - **diverged**: the newest event is a `NonDeterminismDetected` (the workflow is stuck until
      code matching the history appends its next event).
    - **chain_start**: the sequence of the `WorkflowStarted` a StartWorkflow appended, i.e. the
      current run's, or the one the current run was continued from (runs continued from one
      start share its execution timeout).

    Outcomes for nothing pending are ignored here; the read model's `fold` lists them as anomalies.
    """

    activities: dict[int, ActivityScheduled] = field(default_factory=dict)
    timers: dict[int, TimerStarted] = field(default_factory=dict)
    children: dict[int, ChildWorkflowScheduled] = field(default_factory=dict)
    parked: dict[int, ActivityParked] = field(default_factory=dict)
    #: The current run's start; None before the first WorkflowStarted.
    run: WorkflowStarted | None = None
    chain_start: int = 1
    #: The terminal event that ended the current run, if it ended.
    end: HistoryEvent | None = None
    diverged: bool = False

    @classmethod
    def of(cls, history: Iterable[HistoryEvent]) -> "OpenWork":
        """The open work after ``history`` (in sequence order)."""
        work = cls()
        for event in history:
            work.see(event)
        return work

    @property
    def ended(self) -> bool:
        """The current run closed (completed, failed or cancelled)."""
        return self.end is not None

    def see(self, event: HistoryEvent) -> None:
        """Fold the next event of the history in."""
        self.diverged = isinstance(event, NonDeterminismDetected)
        if isinstance(event, WorkflowStarted):
            self.run = event
            self.end = None
            if event.continued_from is None:
                self.chain_start = event.sequence
            self.activities.clear()
            self.timers.clear()
            self.children.clear()
            self.parked.clear()
        elif isinstance(event, ActivityScheduled):
            self.activities[event.sequence] = event
        elif isinstance(event, ActivityCompleted | ActivityFailed):
            self.activities.pop(event.scheduled_sequence, None)
            self.parked.pop(event.scheduled_sequence, None)
        elif isinstance(event, ActivityParked):
            if event.scheduled_sequence in self.activities:
                self.parked[event.scheduled_sequence] = event
        elif isinstance(event, ActivityRetried):
            self.parked.pop(event.scheduled_sequence, None)
        elif isinstance(event, TimerStarted):
            self.timers[event.sequence] = event
        elif isinstance(event, WorkflowTimerFired | TimerCancelled):
            self.timers.pop(event.started_sequence, None)
        elif isinstance(event, ChildWorkflowScheduled):
            self.children[event.sequence] = event
        elif isinstance(event, ChildWorkflowCompleted | ChildWorkflowFailed):
            self.children.pop(event.initiated_sequence, None)
        elif isinstance(event, TERMINAL_EVENTS):
            self.end = event
