"""The system suite's checker can fail: a recorded clean run passes, and each injected fault in it
(a duplicate effect, a missed slot, a compensation out of order, and the rest) is reported with
its ids."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from slotflow.core.identity import rerun_run_id, run_id
from tests.chaos.system.checker import (
    APPLIED,
    COLLAPSED,
    Effect,
    OrderUnderTest,
    Recording,
    ScheduleUnderTest,
    TimerUnderTest,
    check,
    figures_by_fault_kind,
    render_by_fault_kind,
)

T0 = datetime(2026, 3, 29, 0, 59, 58, tzinfo=UTC)


def recorded_run() -> Recording:
    """A small run as collect() records it: two schedules (one across Europe/Berlin's DST jump),
    a timer, a completed and a compensated saga, poison parked and an invalid command rejected."""
    schedules = [
        ScheduleUnderTest("pay-a", "*/2 * * * * *", "Europe/Berlin", T0, T0 + timedelta(seconds=6)),
        ScheduleUnderTest("pay-b", "* * * * * *", "America/New_York", T0, T0 + timedelta(seconds=3)),
    ]
    effects: list[Effect] = []

    def add(kind: str, subject: str, key: str, at: datetime, phase: str = APPLIED) -> None:
        effects.append(Effect(len(effects) + 1, kind, subject, key, phase, 1, "claimer-0", at))

    for schedule in schedules:
        for slot in schedule.slots():
            add(
                "payout",
                schedule.schedule_id,
                run_id(schedule.schedule_id, slot),
                slot + timedelta(seconds=0.3),
            )
    add("timer", "t-1", "timer-1", T0 + timedelta(seconds=5))
    for step, kind in enumerate(("authorize", "reserve", "capture"), start=1):
        add(f"order.{kind}", "order-ok", f"order-ok/{step}", T0 + timedelta(seconds=step))
    for step, kind in enumerate(("authorize", "reserve", "release", "void"), start=1):
        add(f"order.{kind}", "order-no", f"order-no/{step}", T0 + timedelta(seconds=step))
    # Cancelled during the hold: both steps undone, newest first; cancelled during the
    # authorization (the block waited for it): the authorization voided.
    for step, kind in enumerate(("authorize", "reserve", "release", "void"), start=1):
        add(f"order.{kind}", "order-cx", f"order-cx/{step}", T0 + timedelta(seconds=step))
    for step, kind in enumerate(("authorize", "void"), start=1):
        add(f"order.{kind}", "order-cy", f"order-cy/{step}", T0 + timedelta(seconds=step))
    # Cancelled too late: it had completed, the cancel was rejected.
    for step, kind in enumerate(("authorize", "reserve", "capture"), start=1):
        add(f"order.{kind}", "order-cz", f"order-cz/{step}", T0 + timedelta(seconds=step))
    # A redelivered attempt that found its effect already there: counted, not a violation.
    add("payout", "pay-b", effects[0].run_id, T0 + timedelta(seconds=8), phase=COLLAPSED)
    keys = [e.run_id for e in effects if e.phase == APPLIED]
    return Recording(
        schedules=schedules,
        timers=[TimerUnderTest("timer-1", T0 + timedelta(seconds=4))],
        orders=[
            OrderUnderTest("order-ok", declines=False),
            OrderUnderTest("order-no", declines=True),
            OrderUnderTest("order-cx", declines=False, cancelled=True),
            OrderUnderTest("order-cy", declines=True, cancelled=True),
            OrderUnderTest("order-cz", declines=False, cancelled=True),
        ],
        poison_keys=["poison-1"],
        invalid_commands=["bad-cron-1"],
        malformed_signals=["bad-note-order-ok"],
        effects=effects,
        ledger={k: 1 for k in keys if not k.startswith("order-")},
        parked={"poison-1": "undecodable"},
        rejected={
            "bad-cron-1": "invalid cron expression",
            "bad-note-order-ok": "signal 'note' to workflow order-ok: the payload does not fit ...",
            "cancel-order-cz": "workflow order-cz has already ended",
        },
        runs_started=set(keys),
        runs_ended=set(keys),
        workflows_ended={
            "order-ok": "workflow.completed",
            "order-no": "workflow.failed",
            "order-cx": "workflow.cancelled",
            "order-cy": "workflow.cancelled",
            "order-cz": "workflow.completed",
        },
        compensations_registered={
            "order-no": ["void", "release"],
            "order-cx": ["void", "release"],
            "order-cy": ["void"],
            "order-cz": ["void", "release"],
        },
        signals_received={"good-note-order-ok"},
    )


def test_the_recorded_run_passes() -> None:
    report = check(recorded_run())
    assert report.violations == [], report.render()
    # */2 in [00:59:58, 01:00:04] is 4 slots (end_at counts); Berlin jumps 02:00 -> 03:00 at
    # 01:00 UTC, no gap in UTC seconds. * in [T0, T0+3s] is 4 more.
    assert report.counts["slots expected"] == 8
    assert report.counts["slots fired"] == 8
    assert report.counts["sagas completed"] == 1
    assert report.counts["sagas compensated"] == 1
    assert report.counts["sagas cancelled and compensated"] == 2
    assert report.counts["sagas cancelled after 2 step(s)"] == 1
    assert report.counts["sagas cancelled after 1 step(s)"] == 1
    assert report.counts["sagas cancelled after they ended"] == 1
    assert report.counts["malformed signals rejected"] == 1
    assert report.counts["duplicates collapsed"] == 1
    assert report.counts["poison parked"] == 1


def test_a_duplicate_effect_is_reported_with_both_effects() -> None:
    rec = recorded_run()
    first = rec.effects[0]
    rec.effects.append(replace(first, seq=99, fence_token=2, owner="claimer-1"))
    report = check(rec)
    [violation] = report.violations
    assert violation.kind == "duplicate effect"
    assert violation.ids == (first.run_id, f"seq={first.seq}", "seq=99")


def test_a_missed_slot_is_reported() -> None:
    rec = recorded_run()
    lost = rec.effects.pop(1)
    del rec.ledger[lost.run_id]
    rec.runs_started.discard(lost.run_id)
    rec.runs_ended.discard(lost.run_id)
    report = check(rec)
    assert [(v.kind, v.ids) for v in report.violations] == [("missed slot", (lost.run_id,))]


def test_a_slot_skipped_by_policy_is_not_missed() -> None:
    rec = recorded_run()
    lost = rec.effects.pop(1)
    del rec.ledger[lost.run_id]
    rec.skipped.add(lost.run_id)
    assert check(rec).violations == []


def test_an_out_of_order_compensation_is_reported() -> None:
    rec = recorded_run()
    release = next(e for e in rec.effects if e.kind == "order.release")
    void = next(e for e in rec.effects if e.kind == "order.void")
    # Void before release: the authorization dropped while the stock was still held.
    rec.effects = [
        replace(e, seq=void.seq) if e is release else replace(e, seq=release.seq) if e is void else e
        for e in rec.effects
    ]
    [violation] = check(rec).violations
    assert violation.kind == "saga out of order"
    assert violation.ids == ("order-no",)
    assert "('authorize', 'reserve', 'void', 'release')" in violation.detail


def test_a_cancelled_saga_that_left_a_step_in_place_is_reported() -> None:
    """Cancelled while the reservation was in flight, the old way: the reservation happened, its
    undo was never registered, the stock stays held."""
    rec = recorded_run()
    rec.effects = [e for e in rec.effects if not (e.subject == "order-cx" and e.kind == "order.release")]
    rec.compensations_registered["order-cx"] = ["void"]
    [violation] = check(rec).violations
    assert violation.kind == "cancelled saga not undone"
    assert violation.ids == ("order-cx",)
    assert "reserve done with no undo registered: left in place" in violation.detail


def test_a_registered_compensation_run_twice_or_never_is_reported() -> None:
    rec = recorded_run()
    void = next(e for e in rec.effects if e.subject == "order-cy" and e.kind == "order.void")
    # Twice: a second applied effect under another run id (the compensation scheduled again).
    rec.effects.append(replace(void, seq=200, run_id="order-cy/9"))
    rec.runs_started.add("order-cy/9")
    rec.runs_ended.add("order-cy/9")
    # Never: order-cx's release registered but not run.
    rec.effects = [e for e in rec.effects if not (e.subject == "order-cx" and e.kind == "order.release")]
    found = {v.ids[0]: v.detail for v in check(rec).violations}
    assert sorted(found) == ["order-cx", "order-cy"]
    assert "('authorize', 'reserve', 'void')" in found["order-cx"]
    assert "('authorize', 'void', 'void')" in found["order-cy"]


def test_a_malformed_signal_that_reached_its_workflow_or_went_unanswered_is_reported() -> None:
    rec = recorded_run()
    rec.signals_received.add("bad-note-order-ok")
    [reached] = check(rec).violations
    assert (reached.kind, reached.ids) == ("malformed signal reached its workflow", ("bad-note-order-ok",))
    rec = recorded_run()
    del rec.rejected["bad-note-order-ok"]
    [unanswered] = check(rec).violations
    assert (unanswered.kind, unanswered.ids) == ("malformed signal not rejected", ("bad-note-order-ok",))


def test_an_effect_with_no_slot_is_reported() -> None:
    rec = recorded_run()
    stray = run_id("pay-a", T0 + timedelta(seconds=1))  # an odd second: not on */2
    rec.effects.append(
        Effect(100, "payout", "pay-a", stray, APPLIED, 1, "claimer-2", T0 + timedelta(seconds=2))
    )
    rec.ledger[stray] = 1
    assert [(v.kind, v.ids[0]) for v in check(rec).violations] == [("effect with no slot", stray)]


def _forced_rerun(rec: Recording, number: int) -> str:
    """The effect (and ledger row) of a forced re-run of pay-a's first slot, as `#rerun-{number}`."""
    slot = rec.schedules[0].slots()[0]
    again = rerun_run_id("pay-a", slot, number)
    rec.effects.append(
        Effect(100, "payout", "pay-a", again, APPLIED, 1, "claimer-2", slot + timedelta(minutes=5))
    )
    rec.ledger[again] = 1
    return again


def test_an_operators_forced_rerun_is_counted_as_such_not_as_a_duplicate_or_a_stray_effect() -> None:
    rec = recorded_run()
    again = _forced_rerun(rec, 1)
    rec.operator_reruns[again] = "alice: the bank lost the transfer"
    report = check(rec)
    assert report.violations == []
    assert report.counts["operator re-runs"] == 1


def test_a_rerun_no_operator_asked_for_is_a_violation() -> None:
    rec = recorded_run()
    rec.operator_reruns[rerun_run_id("pay-a", rec.schedules[0].slots()[0], 1)] = "alice: once"
    forged = _forced_rerun(rec, 9)
    assert [(v.kind, v.ids[0]) for v in check(rec).violations] == [("forged re-run", forged)]


def test_bad_input_outbox_and_unfinished_work_are_reported() -> None:
    rec = recorded_run()
    rec.parked.clear()
    rec.rejected.clear()
    rec.unpublished.append("ticker.outbox:ev-7")
    rec.runs_started.add("pay-z@x")
    del rec.workflows_ended["order-ok"]
    rec.timers.append(TimerUnderTest("timer-2", T0))
    assert sorted((v.kind, v.ids[0]) for v in check(rec).violations) == [
        ("invalid command not rejected", "bad-cron-1"),
        ("malformed signal not rejected", "bad-note-order-ok"),
        ("missed timer", "timer-2"),
        ("poison not parked", "poison-1"),
        ("unfinished run", "pay-z@x"),
        ("unfinished workflow", "order-ok"),
        ("unpublished outbox row", "ticker.outbox:ev-7"),
    ]


def test_figures_by_fault_kind_count_what_falls_in_each_faults_window() -> None:
    run = recorded_run()
    # A takeover: the first slot of pay-a applied again under a later claim would be a duplicate,
    # so move its one applied effect to claim 2 instead.
    first = run.effects[0]
    run.effects[0] = replace(first, fence_token=2, at=first.at + timedelta(seconds=1.5))
    figures = figures_by_fault_kind(
        run,
        [("sigkill", T0 - timedelta(seconds=1)), ("pg_restart_fast", T0 + timedelta(seconds=5))],
        refusals=[T0, T0 + timedelta(seconds=30)],
        window=timedelta(seconds=3),
    )
    sigkill, restart = figures["sigkill"], figures["pg_restart_fast"]
    # [T0-1s, T0+2s]: pay-a's slots 00:59:58 and 01:00:00, pay-b's 00:59:58 to 01:00:00.
    assert (sigkill.injected, sigkill.slots_due, sigkill.slots_fired) == (1, 5, 5)
    assert sigkill.runs_taken_over == 1
    assert sigkill.stale_writes_refused == 1  # the refusal at T0; the one at T0+30s is in no window
    assert sigkill.max_lateness_s == pytest.approx(1.8)
    # [T0+5s, T0+8s]: no slot of pay-a in it but 01:00:04 (T0+6s); the collapsed redelivery at T0+8s.
    assert (restart.slots_due, restart.slots_fired, restart.duplicates_collapsed) == (1, 1, 1)
    assert restart.runs_taken_over == 0
    table = render_by_fault_kind(figures)
    assert "| sigkill | 1 | 5 / 5 | 1 | 0 | 1 | 1.8 s |" in table, table


def test_expected_slots_follow_the_documented_dst_policy_not_croniters() -> None:
    # Europe/Berlin, 2026-10-25: at 01:00 UTC clocks go back from 03:00 CEST to 02:00 CET. The
    # workload's schedules use the default policy, which fires a repeated wall time once (its first
    # pass), so the second pass of 02:00-02:59 has no slots; croniter alone fires it again, and a
    # checker expecting croniter's slots reported every one of them as missed.
    fall_back = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
    schedule = ScheduleUnderTest(
        "pay-c",
        "*/30 * * * * *",
        "Europe/Berlin",
        fall_back - timedelta(minutes=1),
        fall_back + timedelta(minutes=1),
    )
    assert schedule.slots() == [fall_back - timedelta(minutes=1), fall_back - timedelta(seconds=30)]
    rec = Recording(schedules=[schedule])
    for slot in schedule.slots():
        key = run_id("pay-c", slot)
        rec.effects.append(
            Effect(len(rec.effects) + 1, "payout", "pay-c", key, APPLIED, 1, "claimer-0", slot)
        )
        rec.ledger[key] = 1
        rec.runs_started.add(key)
        rec.runs_ended.add(key)
    report = check(rec)
    assert report.violations == [], report.render()
    assert report.counts["slots expected"] == 2


def test_expected_slots_follow_the_documented_day_rule() -> None:
    # `*/2` starts with `*`, so it does not restrict the day: odd-numbered days that are Mondays.
    # croniter reads it as restricted and ORs the fields (every odd day and every Monday).
    start = datetime(2026, 1, 1, tzinfo=UTC)
    schedule = ScheduleUnderTest("pay-d", "0 0 0 */2 * 1", "UTC", start, start + timedelta(days=31))
    assert schedule.slots() == [datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 19, tzinfo=UTC)]
