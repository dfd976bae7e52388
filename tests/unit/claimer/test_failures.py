"""Failure sorting and the outcome each attempt records (pure)."""

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow.contracts import RetryPolicy
from slotflow.errors import PermanentError, TransientError
from slotflow.runs import UnknownHandler
from slotflow_claimer.executor import sort_failure
from slotflow_claimer.outcomes import Outcome
from tests.unit.claimer.support import run

POLICY = RetryPolicy(base=timedelta(seconds=1), cap=timedelta(seconds=10), max_attempts=4)


@pytest.mark.parametrize("error", [ConnectionError("reset"), TimeoutError(), TransientError(), OSError("io")])
def test_transient_failures_are_retried_with_a_full_jitter_delay(error: Exception) -> None:
    outcome = sort_failure(run(attempt=2, retry=POLICY), error, draw=0.5)
    assert outcome.delay == timedelta(seconds=1)  # 0.5 * min(10 s, 1 s * 2**1)
    assert outcome.dlq_reason is None
    assert outcome.write().state == "retrying"


@given(st.integers(min_value=1, max_value=3), st.floats(min_value=0, max_value=0.999999))
def test_the_delay_never_exceeds_the_ceiling(attempt: int, draw: float) -> None:
    outcome = sort_failure(run(attempt=attempt, retry=POLICY), ConnectionError(), draw=draw)
    assert outcome.delay is not None
    assert timedelta(0) <= outcome.delay < min(POLICY.cap, POLICY.base * 2 ** (attempt - 1))


@pytest.mark.parametrize("error", [PermanentError("no"), ValueError("bad amount"), TypeError("bad")])
def test_permanent_failures_are_dead_lettered_at_once(error: Exception) -> None:
    outcome = sort_failure(run(attempt=1, retry=POLICY), error, draw=0.5)
    assert outcome.delay is None
    assert outcome.dlq_reason == "permanent_error"
    assert outcome.write().state == "dead_lettered"


def test_named_non_retryable_types_are_permanent() -> None:
    class Declined(Exception):
        pass

    policy = RetryPolicy(non_retryable=("Declined",))
    assert sort_failure(run(retry=policy), Declined(), draw=0.1).dlq_reason == "permanent_error"


def test_the_last_attempt_is_dead_lettered_as_exhausted() -> None:
    outcome = sort_failure(run(attempt=4, retry=POLICY), ConnectionError(), draw=0.5)
    assert outcome.dlq_reason == "attempts_exhausted"


def test_a_redrive_opens_a_fresh_budget() -> None:
    # Attempt 6 overall is the second of the budget opened by the redrive at attempt 5.
    outcome = sort_failure(run(attempt=6, round_start=5, retry=POLICY), ConnectionError(), draw=0.5)
    assert outcome.delay is not None


def test_an_unknown_handler_is_dead_lettered_with_its_own_reason() -> None:
    outcome = sort_failure(run(retry=POLICY), UnknownHandler("nobody"), draw=0.5)
    assert outcome.dlq_reason == "unknown_handler"


def test_outcome_writes_carry_the_token_they_ran_under() -> None:
    r = run(token=7)
    completed = Outcome(r, "completed", result={"paid": 1}).write()
    assert (completed.run_id, completed.fence_token, completed.state) == (r.run_id, 7, "completed")
    assert json.loads(completed.result or "null") == {"paid": 1}
    failed = sort_failure(r, PermanentError("closed"), draw=0.5).write()
    assert json.loads(failed.entry or "{}") == {
        "event": "failed",
        "error_type": "PermanentError",
        "message": "closed",
        "reason": "permanent_error",
    }
    cancelled = Outcome(r, "cancelled").write()
    assert cancelled.state == "cancelled"
    assert json.loads(cancelled.entry or "{}")["error_type"] == "RunCancelled"


def test_results_that_are_not_json_are_recorded_as_text() -> None:
    class Receipt:
        def __str__(self) -> str:
            return "receipt-1"

    write = Outcome(run(), "completed", result={"receipt": Receipt()}).write()
    assert json.loads(write.result or "null") == {"receipt": "receipt-1"}
