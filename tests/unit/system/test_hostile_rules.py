"""The checker's rules for the hostile actor can fail: a recorded run with forged records, each
refused or parked, passes; each violation injected into it (a forged result recorded, a result or
effect the real activity did not produce, a sleep ended early, a forged command applied, a forged
record dropped silently) is reported with its ids. And the actor's plan is seeded."""

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.chaos.system.checker import (
    APPLIED,
    FORGED_BY,
    SLEEP_TOLERANCE,
    Effect,
    HostileRecord,
    Recording,
    check,
)
from tests.chaos.system.harness import PROFILES
from tests.chaos.system.hostile import HOSTILE_KINDS, hostile_plan
from tests.unit.system.test_checker import T0, recorded_run

RUNS = "ns.slotflow.runs.events.v1"
TIMERS = "ns.slotflow.timers.events.v1"
SCHEDULES = "ns.slotflow.schedules.commands.v1"
WORKFLOWS = "ns.slotflow.workflows.commands.v1"
#: The hold of order-ok (its sleep at sequence 5, between reserve and capture).
HOLD_ENDS = T0 + timedelta(seconds=2, milliseconds=500)


def attacked_run() -> Recording:
    """The clean recorded run, with what the history topic showed of order-ok (two activities, a
    sleep, the capture, its result) and the hostile actor's records, each answered."""
    rec = recorded_run()
    wf = "order-ok"
    rec.activity_runs = {(wf, 2): f"{wf}/1", (wf, 3): f"{wf}/2", (wf, 7): f"{wf}/3"}
    # The fixture's effects carry run ids order-ok/1..3; the history's activities name them.
    rec.activity_results = {
        (wf, 4): (2, {"run_id": f"{wf}/1", "phase": APPLIED}),
        (wf, 6): (3, {"run_id": f"{wf}/2", "phase": APPLIED}),
        (wf, 8): (7, {"run_id": f"{wf}/3", "phase": APPLIED}),
    }
    rec.workflow_results = {wf: {"run_id": f"{wf}/3", "phase": APPLIED, "notes": []}}
    rec.sleeps_started = {(wf, 5): HOLD_ENDS}
    rec.sleeps_fired = {(wf, 5): HOLD_ENDS + timedelta(milliseconds=40)}
    capture = next(e for e in rec.effects if e.run_id == f"{wf}/3")
    rec.effects[rec.effects.index(capture)] = replace(capture, at=HOLD_ENDS + timedelta(seconds=0.2))
    rec.history_workflows = {wf, "order-no", "order-cx", "order-cy", "order-cz"}
    rec.history_commands = {"start-order-ok", "good-note-order-ok"}
    rec.hostile = [
        HostileRecord("forged_outcome", "wrong fence", RUNS, 0, 17, None, wf),
        HostileRecord("forged_timer", "its own timer early", TIMERS, 1, 3, None, wf),
        HostileRecord(
            "timer_command", "StartTimer on the public topic", SCHEDULES, 2, 40, "attacker-public-start-1"
        ),
        HostileRecord("forged_principal", "StartWorkflow unsigned", WORKFLOWS, 0, 9, "attacker-start-2"),
        HostileRecord("unacceptable", "NUL in a schedule's payload", SCHEDULES, 1, 41, "attacker-nul-3"),
    ]
    rec.letters = {
        f"{RUNS}:0:17": [("orchestrator", "unproven_outcome")],
        f"{TIMERS}:1:3": [("orchestrator", "unproven_timer")],
        f"{SCHEDULES}:1:41": [("ticker", "invalid_payload"), ("api", "invalid_payload")],
    }
    rec.rejected.update(
        {
            "attacker-public-start-1": "timer commands are internal",
            "attacker-start-2": "unsigned: this deployment accepts only signed commands",
        }
    )
    rec.accepted = {"start-order-ok"}
    rec.schedules_seen = {"pay-a", "pay-b"}
    rec.jobs_due = {("pay-a", ""), ("timer-1", "")}
    return rec


def kinds(rec: Recording) -> list[str]:
    return [v.kind for v in check(rec).violations]


def test_the_attacked_run_passes_and_counts_each_refusal() -> None:
    report = check(attacked_run())
    assert report.violations == [], report.render()
    assert report.counts["hostile records refused or parked"] == 5
    assert report.counts["hostile forged_outcome refused or parked"] == 1
    assert report.counts["activity results backed by an effect"] == 3
    assert report.counts["sleeps ended on time"] == 1


def test_a_forged_mark_in_the_history_is_reported() -> None:
    rec = attacked_run()
    rec.forged_marks.append("workflow.activity_completed of order-ok at partition 0 offset 12")
    [violation] = check(rec).violations
    assert violation.kind == "forged result recorded"
    assert violation.ids == ("workflow.activity_completed of order-ok at partition 0 offset 12",)
    assert FORGED_BY in violation.detail


def test_an_activity_result_the_handler_did_not_return_is_reported() -> None:
    rec = attacked_run()
    # The forged event's result, recorded as if the claimer had produced it.
    rec.activity_results[("order-ok", 4)] = (2, {"authorization": "forged", "pay_to": "attacker"})
    [violation] = check(rec).violations
    assert violation.kind == "activity result the real activity did not produce"
    assert violation.ids == ("order-ok", "sequence=2")


def test_an_activity_result_for_a_run_that_left_no_effect_is_reported() -> None:
    rec = attacked_run()
    # An activity that never ran (no effect row), completed with a result naming its run.
    rec.activity_runs[("order-ok", 9)] = "order-ok/9"
    rec.activity_results[("order-ok", 10)] = (9, {"run_id": "order-ok/9", "phase": APPLIED})
    [violation] = check(rec).violations
    assert violation.kind == "activity result the real activity did not produce"
    assert "ran: False" in violation.detail


def test_a_workflow_result_that_is_no_capture_of_its_own_is_reported() -> None:
    rec = attacked_run()
    rec.workflow_results["order-ok"] = {"run_id": "order-no/2", "phase": APPLIED, "notes": []}
    [violation] = check(rec).violations
    assert violation.kind == "workflow result the real activity did not produce"
    assert violation.ids == ("order-ok",)


def test_a_sleep_fired_before_its_time_is_reported() -> None:
    rec = attacked_run()
    rec.sleeps_fired[("order-ok", 5)] = HOLD_ENDS - SLEEP_TOLERANCE - timedelta(milliseconds=1)
    [violation] = check(rec).violations
    assert violation.kind == "sleep ended early"
    assert violation.ids == ("order-ok", "sequence=5")
    # Within the tolerance (a whole-millisecond timestamp) it is not.
    rec.sleeps_fired[("order-ok", 5)] = HOLD_ENDS - timedelta(milliseconds=1)
    assert kinds(rec) == []


def test_a_capture_before_the_hold_ended_is_reported() -> None:
    rec = attacked_run()
    capture = next(e for e in rec.effects if e.run_id == "order-ok/3")
    rec.effects[rec.effects.index(capture)] = replace(capture, at=HOLD_ENDS - timedelta(milliseconds=1))
    [violation] = check(rec).violations
    assert violation.kind == "sleep ended early"
    assert violation.ids == ("order-ok", "order-ok/3")


def test_a_forged_record_neither_refused_nor_parked_is_reported() -> None:
    rec = attacked_run()
    del rec.letters[f"{TIMERS}:1:3"]
    del rec.rejected["attacker-start-2"]
    violations = check(rec).violations
    assert [v.kind for v in violations] == ["hostile record neither refused nor parked"] * 2
    assert violations[0].ids == ("forged_timer", "its own timer early", f"{TIMERS}:1:3", "order-ok")
    assert violations[1].ids == (
        "forged_principal",
        "StartWorkflow unsigned",
        f"{WORKFLOWS}:0:9",
        "attacker-start-2",
    )


def test_a_letter_of_another_position_does_not_answer_a_forged_record() -> None:
    rec = attacked_run()
    rec.letters[f"{RUNS}:0:18"] = rec.letters.pop(f"{RUNS}:0:17")
    assert kinds(rec) == ["hostile record neither refused nor parked"]


def test_an_effect_of_the_attackers_payload_is_reported() -> None:
    rec = attacked_run()
    run = "attacker-job-4@2026-03-29T00:59:59Z"
    rec.effects.append(Effect(99, "attacker-payout", "attacker-job-4", run, APPLIED, 1, "claimer-0", T0))
    rec.ledger[run] = 1
    rec.runs_started.add(run)
    rec.runs_ended.add(run)
    assert kinds(rec) == ["forged command applied"]


def test_a_jobdue_of_the_attackers_is_reported() -> None:
    rec = attacked_run()
    rec.jobs_due.add(("pay-a", "attacker"))
    assert kinds(rec) == ["forged JobDue issued"]
    rec = attacked_run()
    rec.jobs_due.add(("attacker-job-1", ""))
    assert kinds(rec) == ["forged JobDue issued"]


@pytest.mark.parametrize(
    "applied",
    ["accepted", "schedule", "workflow", "history command"],
)
def test_a_forged_command_applied_is_reported(applied: str) -> None:
    rec = attacked_run()
    if applied == "accepted":
        rec.accepted.add("attacker-public-start-1")
    elif applied == "schedule":
        rec.schedules_seen.add("attacker-sched-3")
    elif applied == "workflow":
        rec.history_workflows.add("attacker-wf-2")
    else:
        # A forged cancel that reached a real order's history.
        rec.history_commands.add("attacker-start-2")
    assert kinds(rec) == ["forged command applied"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_hostile_plan_is_seeded_and_sends_every_kind_in_the_short_profile(seed: int) -> None:
    profile = PROFILES["short"]
    plan = hostile_plan(seed, profile.hostile, profile.duration_s)
    assert plan == hostile_plan(seed, profile.hostile, profile.duration_s)
    assert plan != hostile_plan(seed + 1, profile.hostile, profile.duration_s)
    assert {act.kind for act in plan} == set(HOSTILE_KINDS)
    assert all(1 <= act.at_s <= profile.duration_s * 0.85 + 1 for act in plan)
    assert [act.at_s for act in plan] == sorted(act.at_s for act in plan)


def test_a_genuine_timers_firing_read_once_due_may_be_taken_or_dropped_but_an_early_sleep_is_not() -> None:
    rec = attacked_run()
    # The forged early firing under the genuine id, read by the orchestrator after fire_at: taken
    # (or dropped as a copy), no letter. It states a fact by then: no violation of its own...
    rec.hostile[1] = replace(rec.hostile[1], true_from=HOLD_ENDS)
    del rec.letters[f"{TIMERS}:1:3"]
    report = check(rec)
    assert report.violations == [], report.render()
    assert report.counts["hostile records true once read (a due timer's firing)"] == 1
    # ... but had it ended the sleep before its time, the sleep rule sees that on the clocks.
    rec.sleeps_fired[("order-ok", 5)] = HOLD_ENDS - timedelta(seconds=1)
    assert kinds(rec) == ["sleep ended early"]
