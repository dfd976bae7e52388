"""Which slots an operator's re-run or mark touches, and which it leaves out and why.

Pure: the caller judges the range with the slot audit (`slotflow_api.routes.audit.judge`) and gets
back the slots the command names and those it leaves out, each with its reason. The read model may
lag; the fence is the claimer's (a re-run never reopens a live or completed run under the slot's own
run id), so the choice here only decides what to ask for and what to tell the operator.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from slotflow_api.audit import AuditReport, SlotVerdict

Verb = Literal["rerun", "mark"]
#: Run states whose run is in progress: a re-run or a mark would race it, so neither touches it.
RUNNING_STATES = frozenset({"due", "running"})
#: A mark changes nothing the claimer does, so a slot whose run will still be attempted is left out.
MARK_IN_PROGRESS = RUNNING_STATES | {"retrying", "failed", "held"}


@dataclass(frozen=True)
class Chosen:
    """A slot the command names: re-run under its own run id, re-run forced, or marked."""

    slot: datetime
    run_id: str | None
    state: str
    action: Literal["rerun", "forced_rerun", "mark"]


@dataclass(frozen=True)
class LeftOut:
    slot: datetime
    run_id: str | None
    state: str
    reason: str


@dataclass
class Selection:
    chosen: list[Chosen]
    left_out: list[LeftOut]
    #: Slots of the range too recent to judge (within the late threshold or the misfire grace).
    pending: int


def _state(verdict: SlotVerdict) -> str:
    """The run's state when one is recorded, else what the audit found (missed, skipped_by_policy)."""
    return verdict.run_state or verdict.status


def _judged(report: AuditReport) -> list[SlotVerdict]:
    """Every slot of the range with a verdict: the grid's, and the runs off it (a manual trigger, an
    off-grid backfill, a one-shot whose schedule was created after its instant), by slot."""
    off_grid = [
        SlotVerdict(run.slot, run.run_id, "fired", f"run {run.state} (off the grid)", run.kind, run.state)
        for run in report.unscheduled
    ]
    return sorted([*report.slots, *off_grid], key=lambda v: (v.slot, v.run_id or ""))


def select(report: AuditReport, verb: Verb, *, force: bool = False) -> Selection:
    """The slots of ``report`` that a re-run (``force``: completed ones too) or a mark touches."""
    chosen: list[Chosen] = []
    left: list[LeftOut] = []
    for verdict in _judged(report):
        state = _state(verdict)
        reason = _rerun_refusal(verdict, state, force) if verb == "rerun" else _mark_refusal(verdict, state)
        if reason is not None:
            left.append(LeftOut(verdict.slot, verdict.run_id, state, reason))
            continue
        completed = state == "completed" or verdict.status == "duplicated_effect"
        action: Literal["rerun", "forced_rerun", "mark"] = (
            "mark" if verb == "mark" else "forced_rerun" if completed else "rerun"
        )
        chosen.append(Chosen(verdict.slot, verdict.run_id, state, action))
    return Selection(chosen, left, report.pending)


def _rerun_refusal(verdict: SlotVerdict, state: str, force: bool) -> str | None:
    if state in RUNNING_STATES:
        return f"its run is {state}: a running slot is never re-run; wait for it to end"
    if state == "held" or verdict.status == "held":
        return "its run is held for a downstream: it runs when the downstream's circuit closes"
    if (state == "completed" or verdict.status == "duplicated_effect") and not force:
        return (
            "completed: re-running it runs its effect again; pass force (with a reason) to run it as a "
            "new run of its own (#rerun-n)"
        )
    return None


def _mark_refusal(verdict: SlotVerdict, state: str) -> str | None:
    if state in MARK_IN_PROGRESS or verdict.status == "held":
        return f"its run is {state}: it may still run, so marking it would not be true; wait for it to end"
    if state == "completed":
        return "completed: its effect ran; there is nothing to mark"
    return None
