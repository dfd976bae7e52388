"""The slot audit: the slots a schedule should have fired, against what was recorded.

Pure code: the caller reads the schedule's timeline, its runs and skipped slots in the window, and
the database clock, and gets back one verdict per expected slot (`duplicated_effect`,
`skipped_by_policy`, `late`, `held`, `fired`, `missed`; the rules, in order: docs/api.md, "The slot
audit").
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from slotflow.contracts import ScheduleDefinition
from slotflow.core.cronslots import dst_skips_between, slots_between
from slotflow.core.identity import rerun_number, run_id
from slotflow.errors import PermanentError

SlotStatus = Literal["fired", "missed", "skipped_by_policy", "late", "held", "duplicated_effect"]
STATUSES: tuple[SlotStatus, ...] = (
    "fired",
    "missed",
    "skipped_by_policy",
    "late",
    "held",
    "duplicated_effect",
)
#: What became of each judged slot, the audit's headline: a slot that fired is not a success
#: until its run completed (a schedule whose 18 runs all dead-lettered once read "18 fired", in
#: green). Every judged slot has exactly one outcome, so the counts add up to `expected`.
Outcome = Literal["succeeded", "failed", "in_flight", "held", "missed", "skipped", "duplicated_effect"]
OUTCOMES: tuple[Outcome, ...] = (
    "succeeded",
    "failed",
    "in_flight",
    "held",
    "missed",
    "skipped",
    "duplicated_effect",
)
#: Run states that ended without the work done: the slot fired and failed.
FAILED_RUN_STATES = frozenset({"failed", "dead_lettered", "cancelled"})
_TICK = timedelta(microseconds=1)


class AuditRangeTooLarge(PermanentError):
    """The audit window expands to more slots than one request may judge; narrow it."""


@dataclass(frozen=True)
class TimelineEntry:
    """One change in a schedule's life; `definition` is set for created and updated."""

    at: datetime
    change: Literal["created", "updated", "paused", "resumed", "deleted"]
    definition: ScheduleDefinition | None = None


@dataclass(frozen=True)
class RecordedRun:
    """What the read model holds for one run of the schedule."""

    run_id: str
    slot: datetime
    kind: str | None
    state: str
    produced_at: datetime | None
    fire_at: datetime | None
    completions: int
    fence_tokens: tuple[int, ...] = ()
    #: An attempt of the run was held for a downstream (nothing ran); while state is `held`, why.
    was_held: bool = False
    held_reason: str | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class RecordedSkip:
    slot: datetime
    run_id: str
    reason: str
    detail: str


RepairAction = Literal["rerun", "forced_rerun", "marked_done", "marked_skipped"]


@dataclass(frozen=True)
class RecordedRepair:
    """An operator's re-run or mark of a slot (the ticker's SlotsRerun, SlotsMarked)."""

    slot: datetime
    at: datetime
    action: RepairAction
    principal: str | None
    reason: str
    #: A re-run's run: the slot's own, or a forced re-run's `{run id}#rerun-{n}`.
    run_id: str | None = None
    #: That run's state in the read model, when it has one.
    run_state: str | None = None

    def describe(self) -> str:
        """`marked done by alice: paid by hand`, `re-run as p@...#rerun-1 (forced) by bob: lost`."""
        who = self.principal or "an unnamed principal"
        what = {
            "rerun": "re-run",
            "forced_rerun": f"re-run as {self.run_id} (forced)",
            "marked_done": "marked done",
            "marked_skipped": "marked skipped",
        }[self.action]
        return f"{what} by {who}: {self.reason}"


@dataclass(frozen=True)
class SlotVerdict:
    slot: datetime
    run_id: str | None
    status: SlotStatus
    detail: str
    #: The run's kind (scheduled, backfill, ...) when a run is recorded for the slot.
    kind: str | None = None
    #: The run's state when a run is recorded for the slot (completed, dead_lettered, ...).
    run_state: str | None = None
    #: What operators did to the slot (re-runs, marks), oldest first.
    repairs: tuple[RecordedRepair, ...] = ()

    @property
    def outcome(self) -> Outcome:
        """What became of the slot: its run's end for a fired (or late) slot, else the status."""
        if self.status == "missed":
            return "missed"
        if self.status == "skipped_by_policy":
            return "skipped"
        if self.status in ("held", "duplicated_effect"):
            return self.status
        if self.run_state == "completed":
            return "succeeded"
        if self.run_state in FAILED_RUN_STATES:
            return "failed"
        return "in_flight"


@dataclass
class AuditReport:
    slots: list[SlotVerdict] = field(default_factory=list)
    pending: int = 0
    unscheduled: list[RecordedRun] = field(default_factory=list)
    #: Runs in the window (on the grid or off it) that ended dead-lettered: they fired and failed.
    dead_lettered: list[RecordedRun] = field(default_factory=list)
    #: When the schedule was first created, if that is after the window's start (audited from then).
    created_at: datetime | None = None

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for verdict in self.slots:
            counts[verdict.status] += 1
        return counts

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        for verdict in self.slots:
            counts[verdict.outcome] += 1
        return counts


@dataclass(frozen=True)
class _Expected:
    at: datetime
    dst_skip: str | None = None
    #: The schedule's misfire grace: the ticker may still fire the slot (late) until it has passed.
    grace: timedelta = timedelta(0)


def _segments(
    timeline: Sequence[TimelineEntry], start: datetime, end: datetime
) -> list[tuple[datetime, datetime, ScheduleDefinition]]:
    """[begin, finish) intervals with the definition in force, clipped to [start, end)."""
    out: list[tuple[datetime, datetime, ScheduleDefinition]] = []
    current: tuple[datetime, ScheduleDefinition] | None = None

    def close(until: datetime) -> None:
        if current is None:
            return
        begin, definition = current
        lo = max(begin, start, definition.start_at or begin)
        hi = min(until, end)
        if definition.end_at is not None:
            hi = min(hi, definition.end_at + _TICK)
        if lo < hi:
            out.append((lo, hi, definition))

    for entry in timeline:
        if entry.change in ("created", "updated") and entry.definition is not None:
            close(entry.at)
            current = (entry.at, entry.definition)
        elif entry.change == "deleted":
            close(entry.at)
            current = None
    close(end)
    return out


def _paused_intervals(timeline: Sequence[TimelineEntry]) -> list[tuple[datetime, datetime | None]]:
    intervals: list[tuple[datetime, datetime | None]] = []
    paused_at: datetime | None = None
    for entry in timeline:
        if entry.change == "paused" and paused_at is None:
            paused_at = entry.at
        elif entry.change in ("resumed", "deleted", "created") and paused_at is not None:
            intervals.append((paused_at, entry.at))
            paused_at = None
    if paused_at is not None:
        intervals.append((paused_at, None))
    return intervals


def expected_slots(
    timeline: Sequence[TimelineEntry], *, schedule_id: str, start: datetime, end: datetime, limit: int
) -> list[_Expected]:
    """Every slot the schedule's definitions put in [start, end), ascending (an `H` in a cron
    drawn from ``schedule_id``, as the ticker draws it).

    Raises:
        AuditRangeTooLarge: more than ``limit`` slots.
    """
    found: list[_Expected] = []
    for begin, finish, definition in _segments(timeline, start, end):
        # slots_between is (after, until]; shifting both ends by one microsecond makes it [begin, finish).
        after, until = begin - _TICK, finish - _TICK
        room = limit - len(found)
        slots = slots_between(
            definition.spec, definition.dst, after=after, until=until, limit=room + 1, schedule_id=schedule_id
        )
        if len(slots) > room:
            raise AuditRangeTooLarge(
                f"the window holds more than {limit} slots of this schedule; ask for a narrower from/to"
            )
        grace = definition.misfire.grace
        found.extend(_Expected(slot.at, grace=grace) for slot in slots)
        for skipped in dst_skips_between(
            definition.spec, definition.dst, after=after, until=until, schedule_id=schedule_id
        ):
            found.append(_Expected(skipped.at, dst_skip=skipped.detail, grace=grace))
    found.sort(key=lambda e: (e.at, e.dst_skip or ""))
    return found


def audit(
    timeline: Sequence[TimelineEntry],
    runs: Iterable[RecordedRun],
    skips: Iterable[RecordedSkip],
    *,
    schedule_id: str,
    start: datetime,
    end: datetime,
    now: datetime,
    late_threshold: timedelta,
    limit: int,
    repairs: Iterable[RecordedRepair] = (),
) -> AuditReport:
    """Judge every expected slot in [start, end) of one schedule.

    A forced re-run (`{run id}#rerun-{n}`) is an operator's deliberate second effect of its slot,
    not the slot's run: it is shown with the slot's repairs, never judged as the slot (nor counted
    as a duplicated effect).
    """
    runs = list(runs)
    forced = {run.run_id: run for run in runs if rerun_number(run.run_id, run_id(schedule_id, run.slot))}
    by_slot = {run.slot: run for run in runs if run.run_id not in forced}
    by_repaired: dict[datetime, list[RecordedRepair]] = {}
    for repair in sorted(repairs, key=lambda r: r.at):
        # A forced re-run's own state; a re-run of the slot's own run: that run's state now.
        ran = forced.get(repair.run_id or "") or (by_slot.get(repair.slot) if repair.run_id else None)
        by_repaired.setdefault(repair.slot, []).append(replace(repair, run_state=ran.state if ran else None))
    skipped = {skip.slot: skip for skip in skips}
    paused = _paused_intervals(timeline)
    report = AuditReport()
    judged: set[datetime] = set()
    for expected in expected_slots(timeline, schedule_id=schedule_id, start=start, end=end, limit=limit):
        run = by_slot.get(expected.at)
        skip = skipped.get(expected.at)
        verdict = _judge(expected, run, skip, paused, late_threshold)
        if verdict is not None and run is not None and verdict.run_id == run.run_id:
            verdict = replace(verdict, run_state=run.state)
        judged.add(expected.at)
        if verdict is None:
            if expected.at > now - max(late_threshold, expected.grace):
                report.pending += 1
                continue
            verdict = SlotVerdict(expected.at, None, "missed", "no JobDue, run or SlotSkipped was recorded")
        report.slots.append(_with_repairs(verdict, by_repaired.get(expected.at, ())))
    for run in sorted(by_slot.values(), key=lambda r: r.slot):
        if run.slot in judged or not start <= run.slot < end:
            continue
        definition = _definition_at(timeline, run.slot)
        if run.kind == "backfill" and definition is not None and _on_grid(schedule_id, definition, run.slot):
            # A backfill of a slot on the grid fires that slot, even before the schedule existed
            # (that is what backfills are for): a fired slot, with its kind, not an off-grid run.
            report.slots.append(replace(_judge_backfilled(run), run_state=run.state))
        else:
            report.unscheduled.append(run)
    report.slots.sort(key=lambda v: v.slot)
    report.dead_lettered = sorted(
        (run for run in by_slot.values() if run.state == "dead_lettered" and start <= run.slot < end),
        key=lambda r: r.slot,
    )
    created = next((e.at for e in timeline if e.change == "created"), None)
    if created is not None and created > start:
        report.created_at = created
    return report


def _with_repairs(verdict: SlotVerdict, repairs: Sequence[RecordedRepair]) -> SlotVerdict:
    """The verdict with the operators' repairs of its slot; the last mark leads its detail."""
    if not repairs:
        return verdict
    marks = [r for r in repairs if r.action.startswith("marked_")]
    detail = f"{marks[-1].describe()}; {verdict.detail}" if marks else verdict.detail
    return replace(verdict, detail=detail, repairs=tuple(repairs))


def _definition_at(timeline: Sequence[TimelineEntry], at: datetime) -> ScheduleDefinition | None:
    """The definition in force at ``at``; before the first create, the first definition."""
    found: ScheduleDefinition | None = None
    for entry in timeline:
        if entry.definition is None:
            continue
        if found is None or entry.at <= at:
            found = entry.definition
        if entry.at > at:
            break
    return found


def _on_grid(schedule_id: str, definition: ScheduleDefinition, at: datetime) -> bool:
    slots = slots_between(
        definition.spec, definition.dst, after=at - _TICK, until=at, limit=1, schedule_id=schedule_id
    )
    return bool(slots) and slots[0].at == at


def _judge_backfilled(run: RecordedRun) -> SlotVerdict:
    if run.completions > 1:
        tokens = ", ".join(str(t) for t in run.fence_tokens) or "unknown"
        detail = f"{run.completions} claims completed this run (fence tokens {tokens}) (backfill)"
        return SlotVerdict(run.slot, run.run_id, "duplicated_effect", detail, run.kind)
    if run.state == "skipped":
        detail = "the overlap policy skipped the run (backfill)"
        return SlotVerdict(run.slot, run.run_id, "skipped_by_policy", detail, run.kind)
    # Lateness means nothing here: a backfill fires old slots on purpose.
    return SlotVerdict(run.slot, run.run_id, "fired", f"run {run.state} (backfill)", run.kind)


def _judge(
    expected: _Expected,
    run: RecordedRun | None,
    skip: RecordedSkip | None,
    paused: Sequence[tuple[datetime, datetime | None]],
    late_threshold: timedelta,
) -> SlotVerdict | None:
    at = expected.at
    if run is not None:
        if run.completions > 1:
            tokens = ", ".join(str(t) for t in run.fence_tokens) or "unknown"
            detail = f"{run.completions} claims completed this run (fence tokens {tokens})"
            return SlotVerdict(at, run.run_id, "duplicated_effect", detail, run.kind)
        if run.state == "skipped":
            return SlotVerdict(
                at, run.run_id, "skipped_by_policy", "the overlap policy skipped the run", run.kind
            )
        if run.produced_at is None:
            return SlotVerdict(at, run.run_id, "fired", f"run {run.state}; its JobDue was not seen", run.kind)
        target = run.fire_at or at
        lateness = run.produced_at - target
        kind = f" ({run.kind})" if run.kind and run.kind != "scheduled" else ""
        if run.state == "held":
            waited = (
                f"; its JobDue came {lateness.total_seconds():.3f}s after its fire time"
                if lateness > late_threshold
                else ""
            )
            detail = f"waiting for a downstream ({run.held_reason or 'held'}){waited}{kind}"
            return SlotVerdict(at, run.run_id, "held", detail, run.kind)
        if run.was_held and run.state == "completed" and run.finished_at is not None:
            done = run.finished_at - target
            if done > late_threshold:
                detail = (
                    f"held for a downstream; completed {done.total_seconds():.3f}s after its fire time{kind}"
                )
                return SlotVerdict(at, run.run_id, "late", detail, run.kind)
        if lateness > late_threshold:
            detail = (
                f"JobDue produced {lateness.total_seconds():.3f}s after its fire time{kind}; run {run.state}"
            )
            return SlotVerdict(at, run.run_id, "late", detail, run.kind)
        return SlotVerdict(at, run.run_id, "fired", f"run {run.state}{kind}", run.kind)
    if skip is not None:
        detail = f"{skip.reason}: {skip.detail}" if skip.detail else skip.reason
        return SlotVerdict(at, skip.run_id, "skipped_by_policy", detail)
    if expected.dst_skip is not None:
        return SlotVerdict(at, None, "skipped_by_policy", f"dst_nonexistent: {expected.dst_skip}")
    for begin, finish in paused:
        if begin <= at and (finish is None or at < finish):
            # The words the ticker's SlotSkipped will carry once resumed (without catch-up), so
            # the audit says the same before and after the resume.
            return SlotVerdict(at, None, "skipped_by_policy", "paused: passed while paused")
    return None
