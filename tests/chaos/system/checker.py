"""The independent checker of the whole-system fault suite.

It judges a run from what the outside world saw, never from the services' own bookkeeping: the
append-only effects table the handlers write (no unique constraint, so nothing can hide a second
effect), the fenced ledger, and the Kafka topics (run and workflow events, SlotSkipped,
CommandRejected, the DLQ). The slots it expects it computes itself, from the schedule definitions
the workload sent and their start/end instants on the database clock, by the documented cron and
DST semantics (tests/cron_oracle.py: docs/scheduling.md written again, sharing no code with the
ticker), so a documented difference from croniter is never counted as a violation. The
one piece of service state it reads is the outbox tables, for rows never published.

`check` is a pure function of a `Recording`, so a unit test can tamper with a recorded run and see
each violation reported; `collect` (in collect.py) fills a Recording from the real stack.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

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
        if effects[0].kind == PAYOUT and key not in expected:
            report.violations.append(
                Violation(
                    "effect with no slot", (key, f"seq={effects[0].seq}"), "no expected slot has this run id"
                )
            )


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
