"""The retry policy's back-off and attempt budget: the coefficient's growth under the cap, full
jitter on top, unlimited attempts up to the counter's ceiling, and the policy's JSON staying what
consumers of the release before the coefficient read."""

import json
import math
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from slotflow.contracts import RetryPolicy
from slotflow.core.retry import ATTEMPT_CEILING, backoff_ceiling, full_jitter_delay, next_retry_delay
from slotflow_claimer.executor import sort_failure
from tests.unit.claimer.support import run

#: Base and cap up to a day, in milliseconds (the durations a policy is written with).
durations = st.integers(min_value=1, max_value=86_400_000).map(lambda ms: timedelta(milliseconds=ms))
coefficients = st.floats(min_value=1.0, max_value=100.0, allow_nan=False, allow_infinity=False)
attempts = st.integers(min_value=0, max_value=10_000_000)
draws = st.floats(min_value=0.0, max_value=0.999999)


@given(durations, durations, coefficients, attempts, draws)
def test_the_wait_never_exceeds_the_maximum_interval(
    base: timedelta, cap: timedelta, coefficient: float, attempt: int, draw: float
) -> None:
    base, cap = min(base, cap), max(base, cap)
    ceiling = backoff_ceiling(attempt=attempt, base=base, cap=cap, coefficient=coefficient)
    assert min(base, cap) <= ceiling <= cap
    delay = full_jitter_delay(attempt=attempt, base=base, cap=cap, draw=draw, coefficient=coefficient)
    assert timedelta(0) <= delay <= ceiling


@given(durations, durations, coefficients, st.integers(min_value=0, max_value=200))
def test_the_ceiling_grows_with_each_attempt_until_the_cap(
    base: timedelta, cap: timedelta, coefficient: float, attempt: int
) -> None:
    base, cap = min(base, cap), max(base, cap)
    now = backoff_ceiling(attempt=attempt, base=base, cap=cap, coefficient=coefficient)
    after = backoff_ceiling(attempt=attempt + 1, base=base, cap=cap, coefficient=coefficient)
    assert now <= after
    # Below the cap it is base * coefficient**attempt (timedelta keeps microseconds).
    if attempt * math.log(coefficient) < math.log(cap / base):
        exact = base.total_seconds() * coefficient**attempt
        assert abs(now.total_seconds() - exact) <= 1e-6 * max(1.0, exact)


@given(durations, durations, attempts)
def test_coefficient_one_keeps_a_constant_ceiling(base: timedelta, cap: timedelta, attempt: int) -> None:
    base, cap = min(base, cap), max(base, cap)
    assert backoff_ceiling(attempt=attempt, base=base, cap=cap, coefficient=1.0) == base


@given(durations, durations, st.integers(min_value=0, max_value=100))
def test_coefficient_two_is_the_doubling_of_every_policy_before_it(
    base: timedelta, cap: timedelta, attempt: int
) -> None:
    base, cap = min(base, cap), max(base, cap)
    # In microseconds: `base * 2**attempt` as a timedelta overflows past 999,999,999 days (the
    # doubling itself once did, from the 38th attempt of an hour's base).
    micro = timedelta(microseconds=1)
    expected = min(cap // micro, (base // micro) * 2**attempt)
    assert backoff_ceiling(attempt=attempt, base=base, cap=cap) == timedelta(microseconds=expected)


def test_a_policy_with_a_coefficient_and_a_maximum_interval_waits_as_its_schedule_says() -> None:
    policy = RetryPolicy(
        base=timedelta(seconds=1), cap=timedelta(seconds=10), backoff_coefficient=3, max_attempts=7
    )
    # Ceilings before attempts 2..7: 1, 3, 9, then capped at 10; full jitter draws below each.
    ceilings = [
        next_retry_delay(policy, attempt=failed, error=ConnectionError(), draw=0.999999)
        for failed in range(1, 7)
    ]
    assert [round(c.total_seconds(), 3) for c in ceilings if c is not None] == [
        1.0,
        3.0,
        9.0,
        10.0,
        10.0,
        10.0,
    ]
    halves = [
        next_retry_delay(policy, attempt=failed, error=ConnectionError(), draw=0.5) for failed in range(1, 7)
    ]
    assert halves == [timedelta(seconds=s) for s in (0.5, 1.5, 4.5, 5, 5, 5)]
    assert next_retry_delay(policy, attempt=7, error=ConnectionError(), draw=0.5) is None
    # The claimer sorts a failure by the same schedule.
    outcome = sort_failure(run(attempt=3, retry=policy), ConnectionError(), draw=0.5)
    assert outcome.delay == timedelta(seconds=4.5)


def test_zero_attempts_means_no_limit_up_to_the_counters_ceiling() -> None:
    policy = RetryPolicy(max_attempts=0, base=timedelta(seconds=1), cap=timedelta(minutes=5))
    assert policy.unlimited
    for failed in (10, 1_000, 1_000_000, ATTEMPT_CEILING - 1):  # past 2**9 s the 5 min cap holds
        delay = next_retry_delay(policy, attempt=failed, error=ConnectionError(), draw=0.5)
        assert delay == timedelta(seconds=150), failed
    assert next_retry_delay(policy, attempt=ATTEMPT_CEILING, error=ConnectionError(), draw=0.5) is None
    # A permanent failure still ends it at once.
    assert next_retry_delay(policy, attempt=1, error=ValueError("bad amount"), draw=0.5) is None
    # The claimer dead-letters a run at the ceiling as exhausted instead of overflowing attempt + 1.
    assert sort_failure(run(attempt=5, retry=policy), ConnectionError(), draw=0.5).delay is not None
    at_ceiling = sort_failure(run(attempt=ATTEMPT_CEILING, retry=policy), ConnectionError(), draw=0.5)
    assert (at_ceiling.delay, at_ceiling.dlq_reason) == (None, "attempts_exhausted")
    # A redrive's fresh budget does not get past it either.
    redriven = run(
        attempt=ATTEMPT_CEILING, round_start=ATTEMPT_CEILING - 1, retry=RetryPolicy(max_attempts=5)
    )
    assert sort_failure(redriven, ConnectionError(), draw=0.5).dlq_reason == "attempts_exhausted"


def test_the_policys_json_leaves_the_coefficient_out_at_its_default_so_older_consumers_read_it() -> None:
    default = json.loads(RetryPolicy(max_attempts=3).model_dump_json())
    assert "backoff_coefficient" not in default
    assert RetryPolicy.model_validate(default).backoff_coefficient == 2.0
    # A policy from before the field (what older producers and stored rows hold) reads unchanged.
    old = {"base": "PT1S", "cap": "PT2M", "max_attempts": 5, "non_retryable": [], "start_to_close": "PT5M"}
    assert RetryPolicy.model_validate(old) == RetryPolicy()
    used = RetryPolicy(backoff_coefficient=1.5)
    assert json.loads(used.model_dump_json())["backoff_coefficient"] == 1.5
    assert RetryPolicy.model_validate_json(used.model_dump_json()) == used


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"max_attempts": -1}, "max_attempts"),
        ({"max_attempts": 1001}, "max_attempts"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient"),
        ({"backoff_coefficient": float("nan")}, "backoff_coefficient"),
        ({"backoff_coefficient": float("inf")}, "backoff_coefficient"),
        ({"backoff_coefficient": 101}, "backoff_coefficient"),
    ],
)
def test_a_policy_out_of_bounds_is_refused_naming_the_field(fields: dict[str, float], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        RetryPolicy.model_validate(fields)
