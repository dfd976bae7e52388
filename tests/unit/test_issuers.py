"""The issuer rules (slotflow.issuers), pure: an outcome counts only as the claimer's record of its
run backs it, a timer firing only for the timer a workflow started, once it is due."""

from datetime import UTC, datetime, timedelta

import pytest

from slotflow.contracts import RunCompleted, RunDeadLettered
from slotflow.contracts.dlq import KNOWN_REASONS
from slotflow.errors import PoisonMessage, UnprovenOutcome, UnprovenTimer
from slotflow.issuers import (
    ACCEPTED,
    UNPROVEN_OUTCOME,
    UNPROVEN_TIMER,
    RunRecord,
    outcome_verdict,
    timer_verdict,
)

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
RUN = "payout-7/2"


def completed(
    run_id: str = RUN, *, fence: int = 2, attempt: int = 1, result: object = "forged"
) -> RunCompleted:
    return RunCompleted(
        run_id=run_id,
        job_id="payout-7",
        slot=NOW,
        attempt=attempt,
        fence_token=fence,
        owner="attacker",
        workflow_id="payout-7",
        sequence=2,
        result=result,
        started_at=NOW,
        finished_at=NOW,
    )


def dead_lettered(*, fence: int = 2, attempt: int = 1) -> RunDeadLettered:
    return RunDeadLettered(
        run_id=RUN,
        job_id="payout-7",
        slot=NOW,
        attempt=attempt,
        fence_token=fence,
        owner="c",
        workflow_id="payout-7",
        sequence=2,
        reason="permanent_error",
    )


def record(
    state: str = "completed", *, fence: int = 2, attempt: int = 1, handler: str = "bank.pay"
) -> RunRecord:
    return RunRecord(RUN, state, fence, attempt, handler, result="genuine")


def test_an_outcome_the_claimers_record_backs_is_accepted() -> None:
    assert outcome_verdict(completed(), run_id=RUN, handler="bank.pay", record=record()) == ACCEPTED
    verdict = outcome_verdict(dead_lettered(), run_id=RUN, handler="bank.pay", record=record("dead_lettered"))
    assert verdict.accepted


def test_an_outcome_under_another_run_id_is_refused_before_any_record() -> None:
    verdict = outcome_verdict(completed("attacker-run"), run_id=RUN, handler="bank.pay", record=record())
    assert (verdict.reason, verdict.rule) == (UNPROVEN_OUTCOME, "run_id")
    assert "'attacker-run'" in verdict.detail
    assert f"'{RUN}'" in verdict.detail


def test_an_outcome_of_a_run_the_claimer_never_recorded_is_refused() -> None:
    verdict = outcome_verdict(completed(), run_id=RUN, handler="bank.pay", record=None)
    assert (verdict.reason, verdict.rule) == (UNPROVEN_OUTCOME, "no_record")
    assert "holds no record of run" in verdict.detail


@pytest.mark.parametrize(
    ("outcome", "stored", "rule", "says"),
    [
        (completed(fence=999), record(), "fence", "fence 999, recorded 2"),
        (completed(attempt=4), record(), "attempt", "attempt 4, recorded 1"),
        (completed(), record("running"), "state", "completed, recorded running"),
        (dead_lettered(), record("completed"), "state", "dead_lettered, recorded completed"),
        (completed(), record(handler="bank.refund"), "handler", "the claimer ran 'bank.refund'"),
    ],
)
def test_an_outcome_that_differs_from_the_record_is_refused_naming_the_difference(
    outcome: RunCompleted | RunDeadLettered, stored: RunRecord, rule: str, says: str
) -> None:
    verdict = outcome_verdict(outcome, run_id=RUN, handler="bank.pay", record=stored)
    assert (verdict.reason, verdict.rule) == (UNPROVEN_OUTCOME, rule)
    assert verdict.detail.startswith(f"{outcome.message_type} does not match the claimer's record of run ")
    assert says in verdict.detail


def test_every_difference_is_named_the_first_is_the_rule() -> None:
    verdict = outcome_verdict(
        completed(fence=999, attempt=9), run_id=RUN, handler="bank.pay", record=record("running")
    )
    assert verdict.rule == "fence"
    assert "fence 999, recorded 2; attempt 9, recorded 1; completed, recorded running" in verdict.detail


def test_a_forged_result_is_not_the_records_the_record_is_what_counts() -> None:
    """Matching integers is all the verdict asks; the result recorded is the row's, never the event's."""
    stored = record()
    assert outcome_verdict(completed(result="forged"), run_id=RUN, handler="bank.pay", record=stored).accepted
    assert stored.result == "genuine"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"error_type": "CardDeclined", "message": "no", "reason": "permanent_error"},
            ("permanent_error", "CardDeclined", "no"),
        ),
        (
            {"error_type": "Timeout", "message": "slow", "reason": "attempts_exhausted"},
            ("attempts_exhausted", "Timeout", "slow"),
        ),
        (
            {"error_type": "", "message": "x", "reason": "unknown_handler"},
            ("permanent_error", "permanent_error", "x"),
        ),
        (None, ("permanent_error", "permanent_error", "")),
    ],
)
def test_a_dead_lettered_runs_failure_is_the_claimers(
    error: dict[str, str] | None, expected: tuple[str, str, str]
) -> None:
    assert RunRecord(RUN, "dead_lettered", 2, 1, "bank.pay", error=error).failure() == expected


def test_a_refusal_parks_as_poison_with_its_reason() -> None:
    outcome = outcome_verdict(completed(fence=999), run_id=RUN, handler="bank.pay", record=record())
    error = outcome.error()
    assert isinstance(error, UnprovenOutcome)
    assert isinstance(error, PoisonMessage)
    assert (error.reason, str(error)) == (UNPROVEN_OUTCOME, outcome.detail)
    timer = timer_verdict("t", awaited="x", awaited_id=None, fire_at=None, clock=NOW)
    assert isinstance(timer.error(), UnprovenTimer)
    assert {UNPROVEN_OUTCOME, UNPROVEN_TIMER} <= KNOWN_REASONS


def test_a_firing_of_a_timer_never_started_is_refused() -> None:
    verdict = timer_verdict(
        "wf-1#execution-timeout",
        awaited="the execution timeout of workflow wf-1",
        awaited_id=None,
        fire_at=None,
        clock=NOW,
    )
    assert (verdict.reason, verdict.rule) == (UNPROVEN_TIMER, "not_started")
    assert "the execution timeout of workflow wf-1 started no such timer" in verdict.detail


def test_a_firing_under_another_timer_id_is_refused() -> None:
    verdict = timer_verdict(
        "wf-1/timer/9", awaited="the sleep", awaited_id="wf-1/timer/5", fire_at=NOW, clock=NOW
    )
    assert (verdict.reason, verdict.rule) == (UNPROVEN_TIMER, "timer_id")
    assert "'wf-1/timer/9' is not the timer the sleep waits on ('wf-1/timer/5')" in verdict.detail


def test_a_firing_before_its_time_by_the_database_clock_is_refused_at_its_time_accepted() -> None:
    due = NOW + timedelta(hours=1)
    early = timer_verdict(
        "t", awaited="the sleep", awaited_id="t", fire_at=due, clock=due - timedelta(microseconds=1)
    )
    assert (early.reason, early.rule) == (UNPROVEN_TIMER, "early")
    assert due.isoformat() in early.detail
    assert timer_verdict("t", awaited="the sleep", awaited_id="t", fire_at=due, clock=due).accepted
