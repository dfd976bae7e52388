"""The independent checker of the whole-system fault suite.

It judges a run from what the outside world saw, never from the services' own bookkeeping: the
append-only effects table the handlers write (no unique constraint, so nothing can hide a second
effect), the fenced ledger, and the Kafka topics (run and workflow events, SlotSkipped,
CommandRejected, the DLQ). The slots it expects it computes itself, from the schedule definitions
the workload sent and their start/end instants on the database clock, by the documented cron and
DST semantics (tests/cron_oracle.py: docs/scheduling.md written again, sharing no code with the
ticker), so a documented difference from croniter is never counted as a violation. The
pieces of service state it reads are the outbox tables, for rows never published, and the dlq's
letter statuses (an unanswered redrive request must leave its letter visibly `redriving`).

`check` is a pure function of a `Recording`, so a unit test can tamper with a recorded run and see
each violation reported; `collect` (in collect.py) fills a Recording from the real stack.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slotflow.core.identity import RERUN_MARK, rerun_number
from slotflow.core.identity import run_id as slot_run_id
from tests.cron_oracle import expected_slots

#: Effect kinds the workload's handlers write (tests/chaos/system/handlers.py).
PAYOUT = "payout"
TIMER = "timer"
#: A saga's effects in order: the happy path, and the declined capture's compensation (newest first).
SAGA_COMPLETED = ("authorize", "reserve", "capture")
SAGA_COMPENSATED = ("authorize", "reserve", "release", "void")
#: Each forward step's undo (the workload's saga registers `system.<undo>` after `system.<step>`).
UNDO = {"authorize": "void", "reserve": "release"}
APPLIED = "applied"
COLLAPSED = "collapsed"

#: What the hostile actor (hostile.py) names everything it makes with: schedule, workflow, job,
#: run and command ids, the effect kind of the payload it wants run. No workload id starts so.
HOSTILE_PREFIX = "attacker-"
#: The mark on every result the actor forges: wherever this text shows, a forged result was taken.
FORGED_BY = "system-hostile-actor"
FORGED_MARKER = {"forged": True, "forged_by": FORGED_BY}
#: A workflow's sleep may not end before its fire_at. The firing is judged by the broker timestamp
#: of its `timer_fired` history record (the orchestrator's producer, on the database's host, after
#: the decision that checked the database clock): Kafka timestamps are whole milliseconds, so a
#: firing decided in the very millisecond of fire_at can read up to 1 ms before it; 10 ms covers that.
SLEEP_TOLERANCE = timedelta(milliseconds=10)


@dataclass(frozen=True)
class ScheduleUnderTest:
    schedule_id: str
    expression: str
    timezone: str
    start_at: datetime
    end_at: datetime

    def slots(self) -> list[datetime]:
        """Slots in [start_at, end_at] (both ends count, as the ticker's contract has it) under the
        default DST policy the workload's schedules use, computed by the documented semantics,
        never by the ticker's code."""
        slots, _ = expected_slots(
            self.expression,
            self.timezone,
            after=self.start_at - timedelta(microseconds=1),
            until=self.end_at,
            schedule_id=self.schedule_id,
        )
        return [slot.at for slot in slots]


@dataclass(frozen=True)
class TimerUnderTest:
    run_id: str
    fire_at: datetime


@dataclass(frozen=True)
class OrderUnderTest:
    workflow_id: str
    declines: bool
    #: A CancelWorkflow was sent some seconds after the start: mid-saga, or after it ended.
    cancelled: bool = False
    #: A parking order (`system.checkout.parking`): its reservation parks until an operator resumes it.
    parks: bool = False


@dataclass(frozen=True)
class RetryUnderTest:
    """A RetryActivity the operator sent (operator.py): answered by a CommandAccepted (and an
    ActivityRetried of its id) or a CommandRejected with the reason, which changes nothing."""

    command_id: str
    workflow_id: str
    sequence: int
    #: `waiting` (it should resume the step) or `after it <status>` (it should be refused).
    phase: str


@dataclass(frozen=True)
class RedriveUnderTest:
    """A RedriveDeadLetters the operator sent (not its dry runs) and the api's HTTP answer."""

    command_id: str
    phase: str
    http_status: int


@dataclass(frozen=True)
class RedriveRequestSeen:
    """A RedriveRequested the dlq staged on its internal topic: the letter and the owner asked."""

    request_id: str
    dead_letter_id: str
    command_id: str
    target: str
    kind: str
    workflow_id: str | None = None
    sequence: int | None = None


@dataclass(frozen=True)
class Effect:
    seq: int
    kind: str
    subject: str
    run_id: str
    phase: str
    fence_token: int
    owner: str
    at: datetime


@dataclass(frozen=True)
class HostileRecord:
    """One record the hostile actor wrote, where it landed, and the command id it carries (if a
    command): it must be answered by a CommandRejected of that id or a dead letter of that position."""

    kind: str
    variant: str
    topic: str
    partition: int
    offset: int
    command_id: str | None = None
    target: str = ""
    #: The act (numbered from 1) that wrote it.
    act: int = 0
    #: From this instant on the record states a fact (the genuine timer's firing, once due): read
    #: after it, its consumer may take it or drop it as a copy instead of refusing it. Whether the
    #: sleep then ended early is the sleep rule's to judge, on the clocks, not on this record.
    true_from: datetime | None = None

    @property
    def origin(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


@dataclass
class Recording:
    """Everything the checker judges, as read from the effects table, the ledger and the topics."""

    schedules: list[ScheduleUnderTest] = field(default_factory=list)
    timers: list[TimerUnderTest] = field(default_factory=list)
    orders: list[OrderUnderTest] = field(default_factory=list)
    poison_keys: list[str] = field(default_factory=list)
    invalid_commands: list[str] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    #: run id -> fence token of the ledger row.
    ledger: dict[str, int] = field(default_factory=dict)
    #: run ids of slots skipped by an explicit policy (SlotSkipped / run.skipped on the topics).
    skipped: set[str] = field(default_factory=set)
    #: schedule events topic: each forced re-run an operator asked for (the ticker's SlotsRerun),
    #: run id `{slot's run id}#rerun-{n}` -> `who: why`. Its effect is a deliberate second effect of
    #: its slot, not a duplicate; a `#rerun-n` effect no SlotsRerun names is a forged re-run.
    operator_reruns: dict[str, str] = field(default_factory=dict)
    #: DLQ topic: record key -> reason, for every parked record.
    parked: dict[str, str] = field(default_factory=dict)
    #: schedule and workflow events topics: command id -> reason of its CommandRejected.
    rejected: dict[str, str] = field(default_factory=dict)
    #: "table:event id" of outbox rows still unpublished after the quiet period.
    unpublished: list[str] = field(default_factory=list)
    #: run events topic: run ids seen started, and run ids that reached an end.
    runs_started: set[str] = field(default_factory=set)
    runs_ended: set[str] = field(default_factory=set)
    #: workflow events topic: workflow id -> its last terminal event type.
    workflows_ended: dict[str, str] = field(default_factory=dict)
    #: workflow history topic: workflow id -> the compensations its saga registered, in order (the
    #: effect kinds: `void` for `system.void`), one per CompensationRegistered.
    compensations_registered: dict[str, list[str]] = field(default_factory=dict)
    #: Command ids of the `note` signals sent with a payload its handler cannot take.
    malformed_signals: list[str] = field(default_factory=list)
    #: workflow history topic: command ids of the signals that reached a run (SignalReceived).
    signals_received: set[str] = field(default_factory=set)
    #: The hostile actor's records (empty in a run without it).
    hostile: list[HostileRecord] = field(default_factory=list)
    #: DLQ topic: origin (`topic:partition:offset`) -> (parking service, reason) of each letter.
    letters: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: schedule and workflow events topics: command ids with a CommandAccepted.
    accepted: set[str] = field(default_factory=set)
    #: schedule events topic: schedule ids named by any event but a CommandRejected.
    schedules_seen: set[str] = field(default_factory=set)
    #: jobs.due topic: (job id, the payload's `to`) of every JobDue.
    jobs_due: set[tuple[str, str]] = field(default_factory=set)
    #: workflow history topic: every workflow id it names, and every command id its events carry.
    history_workflows: set[str] = field(default_factory=set)
    history_commands: set[str] = field(default_factory=set)
    #: workflow history topic: (workflow id, sequence) -> run id of each ActivityScheduled.
    activity_runs: dict[tuple[str, int], str] = field(default_factory=dict)
    #: workflow history topic: (workflow id, its sequence) -> (scheduled sequence, result) of each
    #: ActivityCompleted.
    activity_results: dict[tuple[str, int], tuple[int, Any]] = field(default_factory=dict)
    #: workflow history topic: workflow id -> the result its WorkflowCompleted recorded.
    workflow_results: dict[str, Any] = field(default_factory=dict)
    #: workflow history topic: (workflow id, sequence) -> fire_at of each TimerStarted, and the
    #: broker timestamp of the first WorkflowTimerFired of it (by started_sequence).
    sleeps_started: dict[tuple[str, int], datetime] = field(default_factory=dict)
    sleeps_fired: dict[tuple[str, int], datetime] = field(default_factory=dict)
    #: Where FORGED_BY showed in the workflow history topic (record positions).
    forged_marks: list[str] = field(default_factory=list)
    #: The operator's RetryActivity commands and redrives (operator.py).
    operator_retries: list[RetryUnderTest] = field(default_factory=list)
    operator_redrives: list[RedriveUnderTest] = field(default_factory=list)
    #: dlq.redrives topic: request id -> the RedriveRequested the dlq staged.
    redrive_requests: dict[str, RedriveRequestSeen] = field(default_factory=dict)
    #: DLQ topic: request id -> (outcome, reason) of the first RedriveOutcome answering it.
    redrive_outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The dlq's table: dead letter id -> its status at the end.
    letter_statuses: dict[str, str] = field(default_factory=dict)
    #: workflow history topic: (workflow id, scheduled sequence) of each ActivityParked.
    activities_parked: set[tuple[str, int]] = field(default_factory=set)
    #: workflow history topic: (workflow id, its sequence) -> (scheduled sequence, command id) of
    #: each ActivityRetried (by its own sequence: a republished event counts once).
    activity_retries: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    kind: str
    ids: tuple[str, ...]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail} [{', '.join(self.ids)}]"


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    #: The latest an effect landed after its slot (or timer's fire_at), in seconds.
    max_lateness_s: float = 0.0

    def kinds(self) -> set[str]:
        return {v.kind for v in self.violations}

    def render(self) -> str:
        lines = [f"  {name}: {n}" for name, n in sorted(self.counts.items())]
        lines.append(f"  max lateness: {self.max_lateness_s:.2f} s")
        lines.append(f"  violations: {len(self.violations)}")
        lines.extend(f"    {v}" for v in self.violations)
        return "\n".join(lines)


def check(rec: Recording) -> Report:
    report = Report()
    applied: dict[str, list[Effect]] = defaultdict(list)
    for effect in sorted(rec.effects, key=lambda e: e.seq):
        if effect.phase == APPLIED:
            applied[effect.run_id].append(effect)
        elif effect.phase == COLLAPSED:
            report.counts["duplicates collapsed"] += 1

    # One effect per idempotency key, whatever the kind.
    for key, effects in sorted(applied.items()):
        if len(effects) > 1:
            report.violations.append(
                Violation(
                    "duplicate effect",
                    (key, *(f"seq={e.seq}" for e in effects)),
                    f"{len(effects)} applied effects by {sorted({f'{e.owner}#{e.fence_token}' for e in effects})}",
                )
            )

    _check_slots(rec, applied, report)
    _check_timers(rec, applied, report)
    _check_sagas(rec, applied, report)
    _check_ledger(rec, applied, report)
    _check_bad_input(rec, report)
    _check_forged_results(rec, applied, report)
    _check_sleeps(rec, applied, report)
    _check_hostile(rec, applied, report)
    _check_compensated_steps(rec, report)
    _check_redrives(rec, report)
    _check_retries(rec, applied, report)

    for row in rec.unpublished:
        report.violations.append(Violation("unpublished outbox row", (row,), "never published"))
    for run in sorted(rec.runs_started - rec.runs_ended):
        report.violations.append(Violation("unfinished run", (run,), "started, never ended"))
    return report


def _check_slots(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    expected: set[str] = set()
    for schedule in rec.schedules:
        for slot in schedule.slots():
            key = slot_run_id(schedule.schedule_id, slot)
            expected.add(key)
            report.counts["slots expected"] += 1
            effects = applied.get(key, [])
            if effects:
                report.counts["slots fired"] += 1
                report.max_lateness_s = max(report.max_lateness_s, (effects[0].at - slot).total_seconds())
                if effects[0].at < slot:
                    report.violations.append(
                        Violation("fired early", (key,), f"effect at {effects[0].at.isoformat()}")
                    )
            elif key in rec.skipped:
                report.counts["slots skipped by policy"] += 1
            else:
                report.violations.append(
                    Violation(
                        "missed slot", (key,), f"no effect for {schedule.schedule_id} at {slot.isoformat()}"
                    )
                )
    for key, effects in sorted(applied.items()):
        if effects[0].kind != PAYOUT or key in expected:
            continue
        slot_key = _rerun_of(key)
        if slot_key is not None and slot_key in expected:
            if key in rec.operator_reruns:
                # An operator ran the completed slot again on purpose, as a run of its own.
                report.counts["operator re-runs"] += 1
                continue
            report.violations.append(
                Violation(
                    "forged re-run",
                    (key, f"seq={effects[0].seq}"),
                    f"an effect of re-run {rerun_number(key, slot_key)} of {slot_key}, which no operator "
                    "asked for (no SlotsRerun names it)",
                )
            )
            continue
        report.violations.append(
            Violation(
                "effect with no slot", (key, f"seq={effects[0].seq}"), "no expected slot has this run id"
            )
        )


def _rerun_of(key: str) -> str | None:
    """The slot's run id when ``key`` is a forced re-run's `{slot's run id}#rerun-{n}`, else None."""
    base, mark, _ = key.rpartition(RERUN_MARK)
    if not mark or rerun_number(key, base) is None:
        return None
    return base


def _check_timers(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    for timer in rec.timers:
        effects = applied.get(timer.run_id, [])
        if not effects:
            report.violations.append(Violation("missed timer", (timer.run_id,), "never fired"))
            continue
        report.counts["timers fired"] += 1
        lateness = (effects[0].at - timer.fire_at).total_seconds()
        report.max_lateness_s = max(report.max_lateness_s, lateness)
        if lateness < 0:
            report.violations.append(Violation("fired early", (timer.run_id,), f"{-lateness:.3f} s early"))


def _check_sagas(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    by_order: dict[str, list[Effect]] = defaultdict(list)
    for effects in applied.values():
        for effect in effects:
            if effect.kind.startswith("order."):
                by_order[effect.subject].append(effect)
    for order in rec.orders:
        seen = tuple(
            e.kind.removeprefix("order.")
            for e in sorted(by_order.get(order.workflow_id, []), key=lambda e: e.seq)
        )
        ended = rec.workflows_ended.get(order.workflow_id)
        if ended is None:
            report.violations.append(
                Violation("unfinished workflow", (order.workflow_id,), f"effects so far {seen}")
            )
            continue
        if order.cancelled and ended == "workflow.cancelled":
            _check_cancelled_saga(rec, order, seen, report)
            continue
        # Not cancelled, or the cancel came after the saga had ended (it was rejected): the saga
        # ran its own course.
        want, end = (
            (SAGA_COMPENSATED, "workflow.failed")
            if order.declines
            else (SAGA_COMPLETED, "workflow.completed")
        )
        if seen != want or ended != end:
            report.violations.append(
                Violation(
                    "saga out of order",
                    (order.workflow_id,),
                    f"effects {seen}, ended {ended}; want {want}, {end}",
                )
            )
        elif order.cancelled:
            report.counts["sagas cancelled after they ended"] += 1
        elif order.parks:
            report.counts[f"parking sagas resumed, then {end.removeprefix('workflow.')}"] += 1
        elif order.declines:
            report.counts["sagas compensated"] += 1
        else:
            report.counts["sagas completed"] += 1


def _check_cancelled_saga(
    rec: Recording, order: OrderUnderTest, seen: tuple[str, ...], report: Report
) -> None:
    """A saga cancelled mid-way: every compensation it registered ran exactly once, newest first,
    and nothing it did is left in place (every forward effect has its undo registered and run)."""
    registered = rec.compensations_registered.get(order.workflow_id, [])
    forward = tuple(kind for kind in seen if kind in UNDO or kind == "capture")
    want = (*forward, *(UNDO[kind] for kind in reversed(forward) if kind in UNDO))
    problems: list[str] = []
    if "capture" in forward:
        problems.append("captured, then cancelled")
    left = [kind for kind in forward if kind in UNDO and UNDO[kind] not in registered]
    if left:
        problems.append(f"{', '.join(left)} done with no undo registered: left in place")
    if tuple(registered) != tuple(UNDO[kind] for kind in forward if kind in UNDO):
        problems.append(f"registered {registered} for forward effects {forward}")
    if seen != want:
        problems.append(f"effects {seen}; every registered undo once, newest first, is {want}")
    if problems:
        report.violations.append(
            Violation("cancelled saga not undone", (order.workflow_id,), "; ".join(problems))
        )
        return
    report.counts["sagas cancelled and compensated"] += 1
    report.counts[f"sagas cancelled after {len(forward)} step(s)"] += 1


def _check_ledger(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    for key, effects in applied.items():
        if effects[0].kind in (PAYOUT, TIMER) and key not in rec.ledger:
            report.violations.append(Violation("effect missing from ledger", (key,), "no ledger row"))
    for key in sorted(set(rec.ledger) - set(applied)):
        report.violations.append(Violation("ledger row with no effect", (key,), "no applied effect"))


def _check_bad_input(rec: Recording, report: Report) -> None:
    for key in rec.poison_keys:
        reason = rec.parked.get(key)
        if reason:
            report.counts["poison parked"] += 1
        else:
            report.violations.append(Violation("poison not parked", (key,), "no DLQ record with a reason"))
    for command_id in rec.invalid_commands:
        if rec.rejected.get(command_id):
            report.counts["invalid commands rejected"] += 1
        else:
            report.violations.append(
                Violation("invalid command not rejected", (command_id,), "no CommandRejected")
            )
    for command_id in rec.malformed_signals:
        if command_id in rec.signals_received:
            report.violations.append(
                Violation(
                    "malformed signal reached its workflow",
                    (command_id,),
                    "its payload does not fit the handler's type; it must be rejected at intake",
                )
            )
        elif rec.rejected.get(command_id):
            report.counts["malformed signals rejected"] += 1
        else:
            report.violations.append(
                Violation("malformed signal not rejected", (command_id,), "no CommandRejected")
            )


def _check_forged_results(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    """No workflow result or effect the real activity did not produce: every activity result in
    the history is the one its handler returns (`{"run_id": <its run>, ...}`) for a run that left an
    effect, a completed order's result is its capture's, and no forged mark shows anywhere."""
    ran = {e.run_id for e in rec.effects}
    for where in rec.forged_marks:
        report.violations.append(Violation("forged result recorded", (where,), f"{FORGED_BY} in the history"))
    for (workflow_id, _), (sequence, result) in sorted(rec.activity_results.items()):
        run = rec.activity_runs.get((workflow_id, sequence))
        produced = isinstance(result, dict) and run is not None and result.get("run_id") == run and run in ran
        if produced:
            report.counts["activity results backed by an effect"] += 1
            continue
        report.violations.append(
            Violation(
                "activity result the real activity did not produce",
                (workflow_id, f"sequence={sequence}"),
                f"result {result!r:.200} for run {run}; the handler returns its own run id, and ran: {run in ran}",
            )
        )
    captures = {
        effects[0].run_id: effects[0].subject
        for effects in applied.values()
        if effects[0].kind == "order.capture"
    }
    for workflow_id, result in sorted(rec.workflow_results.items()):
        capture = result.get("run_id") if isinstance(result, dict) else None
        if captures.get(str(capture)) != workflow_id:
            report.violations.append(
                Violation(
                    "workflow result the real activity did not produce",
                    (workflow_id,),
                    f"result {result!r:.200} is no capture this order applied",
                )
            )


def _check_sleeps(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    """No sleep ended early: its firing's history record is not before its fire_at (the broker's
    timestamp, SLEEP_TOLERANCE), and no capture (the step after the hold) applied before it (the
    database clock, no tolerance: the effect's `at` and fire_at are both that clock's)."""
    first_sleep: dict[str, datetime] = {}
    for (workflow_id, sequence), fire_at in sorted(rec.sleeps_started.items()):
        first_sleep.setdefault(workflow_id, fire_at)
        fired = rec.sleeps_fired.get((workflow_id, sequence))
        if fired is None:
            continue
        if fired < fire_at - SLEEP_TOLERANCE:
            report.violations.append(
                Violation(
                    "sleep ended early",
                    (workflow_id, f"sequence={sequence}"),
                    f"fired {(fire_at - fired).total_seconds():.3f} s before its fire_at {fire_at.isoformat()}",
                )
            )
        else:
            report.counts["sleeps ended on time"] += 1
    for effects in applied.values():
        effect = effects[0]
        due = first_sleep.get(effect.subject)
        if effect.kind == "order.capture" and due is not None and effect.at < due:
            report.violations.append(
                Violation(
                    "sleep ended early",
                    (effect.subject, effect.run_id),
                    f"captured at {effect.at.isoformat()}, before the hold's end {due.isoformat()}",
                )
            )


def _check_hostile(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    """No forged command applied, and every forged record visibly refused or parked."""
    hostile_commands = {r.command_id for r in rec.hostile if r.command_id}
    for record in rec.hostile:
        rejection = rec.rejected.get(record.command_id or "")
        letters = rec.letters.get(record.origin, [])
        ids = (record.kind, record.variant, record.origin)
        if record.command_id in rec.accepted:
            report.violations.append(
                Violation("forged command applied", ids, "a CommandAccepted answered it")
            )
        if rejection or letters:
            report.counts["hostile records refused or parked"] += 1
            report.counts[f"hostile {record.kind} refused or parked"] += 1
        elif record.true_from is not None:
            report.counts["hostile records true once read (a due timer's firing)"] += 1
        else:
            report.violations.append(
                Violation(
                    "hostile record neither refused nor parked",
                    (*ids, record.command_id or record.target),
                    "no CommandRejected of its command id and no dead letter of its position: dropped silently",
                )
            )
    for effects in applied.values():
        for effect in effects:
            if HOSTILE_PREFIX in f"{effect.kind} {effect.subject} {effect.run_id}":
                report.violations.append(
                    Violation(
                        "forged command applied",
                        (effect.run_id, f"seq={effect.seq}"),
                        f"a handler ran the attacker's work: {effect.kind} for {effect.subject}",
                    )
                )
    for job_id, to in sorted(rec.jobs_due):
        if job_id.startswith(HOSTILE_PREFIX) or to == "attacker":
            report.violations.append(
                Violation(
                    "forged JobDue issued", (job_id,), f"a JobDue of the attacker's (to {to!r}) on jobs.due"
                )
            )
    for schedule_id in sorted(rec.schedules_seen):
        if schedule_id.startswith(HOSTILE_PREFIX):
            report.violations.append(
                Violation(
                    "forged command applied", (schedule_id,), "the ticker has a schedule the attacker named"
                )
            )
    for workflow_id in sorted(rec.history_workflows):
        if workflow_id.startswith(HOSTILE_PREFIX):
            report.violations.append(
                Violation(
                    "forged command applied", (workflow_id,), "a workflow the attacker started has a history"
                )
            )
    for command_id in sorted(rec.history_commands & hostile_commands):
        report.violations.append(
            Violation(
                "forged command applied", (command_id,), "a workflow's history holds the attacker's command"
            )
        )


def _check_compensated_steps(rec: Recording, report: Report) -> None:
    """A compensated step never runs again after its compensation: per order, no effect row of a
    forward step (applied or collapsed: the handler ran either way) later than its undo's effect."""
    by_order: dict[str, list[Effect]] = defaultdict(list)
    for effect in rec.effects:
        if effect.kind.startswith("order."):
            by_order[effect.subject].append(effect)
    for subject, effects in sorted(by_order.items()):
        for step, undo in UNDO.items():
            undone = [e.at for e in effects if e.kind == f"order.{undo}" and e.phase == APPLIED]
            if not undone:
                continue
            report.counts["compensated steps"] += 1
            again = [e for e in effects if e.kind == f"order.{step}" and e.at > min(undone)]
            for effect in again:
                report.violations.append(
                    Violation(
                        "compensated step ran again",
                        (subject, effect.run_id, f"seq={effect.seq}"),
                        f"{step} {effect.phase} at {effect.at.isoformat()}, after its {undo} at "
                        f"{min(undone).isoformat()}",
                    )
                )


def _check_redrives(rec: Recording, report: Report) -> None:
    """Every redrive request the dlq staged is answered (done, or refused with a reason) or its
    letter visibly `redriving` at the end; every redrive the operator sent is accepted or rejected."""
    for request_id, request in sorted(rec.redrive_requests.items()):
        ids = (request.dead_letter_id, request.target, request_id)
        answer = rec.redrive_outcomes.get(request_id)
        if answer is None:
            if rec.letter_statuses.get(request.dead_letter_id) == "redriving":
                report.counts["redrive requests still redriving, visibly"] += 1
                continue
            status = rec.letter_statuses.get(request.dead_letter_id, "no row")
            report.violations.append(
                Violation(
                    "redrive request lost",
                    ids,
                    f"no RedriveOutcome answers it and its letter reads {status!r}, not 'redriving'",
                )
            )
            continue
        outcome, reason = answer
        if outcome == "refused" and not reason.strip():
            report.violations.append(Violation("redrive refused without a reason", ids, "empty reason"))
            continue
        report.counts[f"redrive requests {'redriven' if outcome == 'done' else 'refused with a reason'}"] += 1
    for redrive in rec.operator_redrives:
        if redrive.command_id in rec.accepted or rec.rejected.get(redrive.command_id):
            report.counts["operator redrives answered"] += 1
        else:
            report.violations.append(
                Violation(
                    "redrive command unanswered",
                    (redrive.command_id, redrive.phase),
                    f"no CommandAccepted nor CommandRejected with a reason (the api said {redrive.http_status})",
                )
            )


def _check_retries(rec: Recording, applied: dict[str, list[Effect]], report: Report) -> None:
    """A retried parked activity runs at most once per retry, and a refused retry changes nothing:
    every RetryActivity is answered; no ActivityRetried carries a refused retry's or refused
    redrive's id; a parked activity's run has no more applied effects than accepted retries, and
    its step completes at most once."""
    retried_by: dict[tuple[str, int], set[str]] = defaultdict(set)
    for (workflow_id, _), (scheduled, command_id) in rec.activity_retries.items():
        retried_by[(workflow_id, scheduled)].add(command_id)
    for retry in rec.operator_retries:
        ids = (retry.command_id, retry.workflow_id, f"sequence={retry.sequence}", retry.phase)
        refused = rec.rejected.get(retry.command_id)
        if retry.command_id not in rec.accepted and not refused:
            report.violations.append(
                Violation("retry unanswered", ids, "no CommandAccepted nor CommandRejected with a reason")
            )
        elif refused:
            report.counts["retries refused with a reason"] += 1
            if retry.command_id in retried_by[(retry.workflow_id, retry.sequence)]:
                report.violations.append(
                    Violation("refused retry changed the workflow", ids, f"refused ({refused}), yet retried")
                )
        else:
            report.counts["retries accepted"] += 1
    done = {
        (r.command_id, r.workflow_id, r.sequence)
        for request_id, r in rec.redrive_requests.items()
        if rec.redrive_outcomes.get(request_id, ("", ""))[0] == "done"
    }
    for request_id, r in sorted(rec.redrive_requests.items()):
        outcome, reason = rec.redrive_outcomes.get(request_id, ("", ""))
        key = (r.command_id, r.workflow_id, r.sequence)
        if r.workflow_id is None or r.sequence is None or outcome != "refused" or key in done:
            continue
        if r.command_id in retried_by[(r.workflow_id, r.sequence)]:
            report.violations.append(
                Violation(
                    "refused retry changed the workflow",
                    (r.dead_letter_id, r.workflow_id, f"sequence={r.sequence}"),
                    f"its redrive was refused ({reason}), yet the activity was retried by it",
                )
            )
    completions: Counter[tuple[str, int]] = Counter(
        (workflow_id, scheduled) for (workflow_id, _), (scheduled, _) in rec.activity_results.items()
    )
    for workflow_id, sequence in sorted(rec.activities_parked):
        step = (workflow_id, f"sequence={sequence}")
        report.counts["activities parked"] += 1
        run = rec.activity_runs.get((workflow_id, sequence))
        retries = len(retried_by[(workflow_id, sequence)])
        ran = len(applied.get(run or "", []))
        if ran > retries:
            report.violations.append(
                Violation(
                    "parked activity ran without a retry",
                    (*step, run or "?"),
                    f"{ran} applied effects for {retries} accepted retries",
                )
            )
        if completions[(workflow_id, sequence)] > 1:
            report.violations.append(
                Violation(
                    "retried activity completed twice",
                    step,
                    f"{completions[(workflow_id, sequence)]} ActivityCompleted for one step",
                )
            )
        elif ran:
            report.counts["parked activities retried, then run once"] += 1


#: How long after a fault's injection its effects are looked for: long enough to cover the fault
#: itself (a PostgreSQL restart, a lease expiring after SIGSTOP) and the recovery after it.
FAULT_WINDOW = timedelta(seconds=30)


@dataclass
class FaultKindFigures:
    """What happened in the windows after the faults of one kind (windows of different faults
    overlap when faults come closer than FAULT_WINDOW, so one slot may count for several kinds)."""

    injected: int = 0
    slots_due: int = 0
    slots_fired: int = 0
    #: Runs whose applied effect was written under a later claim than the first (fence token above
    #: 1): the run was taken over, or retried after a failed attempt.
    runs_taken_over: int = 0
    duplicates_collapsed: int = 0
    #: Writes the fence refused (from the claimers' logs: the one figure not read from the effects).
    stale_writes_refused: int = 0
    max_lateness_s: float = 0.0


def figures_by_fault_kind(
    rec: Recording,
    injected: list[tuple[str, datetime]],
    refusals: list[datetime] | None = None,
    window: timedelta = FAULT_WINDOW,
) -> dict[str, FaultKindFigures]:
    """Per fault kind, the slots due and the effects written in the window after each injection.

    Reporting only: the verdict is `check`'s. Read from the same sources as `check` (the effects
    table and the schedules' own slots), with the injection times on the host's clock (the
    database runs on the same host, so its clock is the same one)."""
    windows: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    figures: dict[str, FaultKindFigures] = {}
    for kind, at in injected:
        windows[kind].append((at, at + window))
        figures.setdefault(kind, FaultKindFigures()).injected += 1
    first_applied: dict[str, Effect] = {}
    for effect in sorted(rec.effects, key=lambda e: e.seq):
        if effect.phase == APPLIED:
            first_applied.setdefault(effect.run_id, effect)

    def inside(kind: str, moment: datetime) -> bool:
        return any(start <= moment <= end for start, end in windows[kind])

    slots = [
        (slot, slot_run_id(schedule.schedule_id, slot))
        for schedule in rec.schedules
        for slot in schedule.slots()
    ]
    for kind, kind_figures in figures.items():
        for slot, key in slots:
            if not inside(kind, slot):
                continue
            kind_figures.slots_due += 1
            fired = first_applied.get(key)
            if fired is not None:
                kind_figures.slots_fired += 1
                lateness = (fired.at - slot).total_seconds()
                kind_figures.max_lateness_s = max(kind_figures.max_lateness_s, lateness)
        for effect in rec.effects:
            if not inside(kind, effect.at):
                continue
            if effect.phase == COLLAPSED:
                kind_figures.duplicates_collapsed += 1
            elif effect.phase == APPLIED and effect.fence_token > 1:
                kind_figures.runs_taken_over += 1
        kind_figures.stale_writes_refused = sum(1 for moment in refusals or () if inside(kind, moment))
    return figures


def render_by_fault_kind(figures: dict[str, FaultKindFigures]) -> str:
    """A Markdown table of `figures_by_fault_kind`, a row per kind."""
    lines = [
        "| fault kind | injected | slots due in its windows / fired | runs taken over | duplicates collapsed "
        "| stale writes refused | max lateness |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, f in sorted(figures.items()):
        lines.append(
            f"| {kind} | {f.injected} | {f.slots_due} / {f.slots_fired} | {f.runs_taken_over} "
            f"| {f.duplicates_collapsed} | {f.stale_writes_refused} | {f.max_lateness_s:.1f} s |"
        )
    return "\n".join(lines)
