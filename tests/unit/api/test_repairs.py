"""Which slots a re-run or a mark touches, and which it leaves out with the reason (pure)."""

from datetime import UTC, datetime, timedelta

from slotflow_api.audit import AuditReport, RecordedRun, SlotVerdict
from slotflow_api.repairs import select

T0 = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def report(*states: str | None, pending: int = 0) -> AuditReport:
    """One slot an hour per state (None: missed, nothing recorded)."""
    slots = []
    for hour, state in enumerate(states):
        at = T0 + timedelta(hours=hour)
        status = "missed" if state is None else "fired"
        slots.append(SlotVerdict(at, None if state is None else f"p@{at}", status, "", run_state=state))  # type: ignore[arg-type]
    return AuditReport(slots=slots, pending=pending)


STATES = ("completed", "dead_lettered", "running", None, "retrying", "held", "skipped", "due", "failed")


def test_a_rerun_takes_what_failed_or_never_ran_and_leaves_out_what_runs_or_completed() -> None:
    chosen = select(report(*STATES), "rerun")
    assert [c.state for c in chosen.chosen] == ["dead_lettered", "missed", "retrying", "skipped", "failed"]
    assert {c.action for c in chosen.chosen} == {"rerun"}
    left = {lo.state: lo.reason for lo in chosen.left_out}
    assert set(left) == {"completed", "running", "held", "due"}
    assert "pass force" in left["completed"]
    assert "never re-run" in left["running"]


def test_force_reruns_a_completed_slot_as_a_run_of_its_own_but_never_a_running_one() -> None:
    chosen = select(report(*STATES), "rerun", force=True)
    assert [(c.state, c.action) for c in chosen.chosen if c.action == "forced_rerun"] == [
        ("completed", "forced_rerun")
    ]
    assert {lo.state for lo in chosen.left_out} == {"running", "held", "due"}


def test_a_mark_leaves_out_every_slot_whose_run_may_still_run_and_completed_ones() -> None:
    chosen = select(report(*STATES, pending=2), "mark")
    assert [c.state for c in chosen.chosen] == ["dead_lettered", "missed", "skipped"]
    assert {lo.state for lo in chosen.left_out} == {
        "completed",
        "running",
        "retrying",
        "held",
        "due",
        "failed",
    }
    assert chosen.pending == 2


def test_a_run_off_the_grid_is_repairable_too() -> None:
    # A manual trigger's run, or a one-shot whose schedule was created after its instant: listed by
    # the audit as unscheduled, and re-run like any slot.
    off_grid = RecordedRun("p@x", T0, "manual", "dead_lettered", None, None, 0)
    chosen = select(AuditReport(unscheduled=[off_grid]), "rerun")
    assert [(c.run_id, c.state, c.action) for c in chosen.chosen] == [("p@x", "dead_lettered", "rerun")]
