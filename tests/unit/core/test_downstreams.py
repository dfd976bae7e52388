"""Retry budget arithmetic and the circuit breaker's state machine (pure; see core/downstreams.py)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import DownstreamSettings
from slotflow.core.downstreams import (
    OPERATOR_OPEN_RECHECK,
    Breaker,
    DownstreamPolicy,
    admit,
    observe,
    retry_allowance,
    retry_allowed,
    with_settings,
)
from slotflow.errors import DownstreamUnavailable, TransientError
from slotflow.runs import HandlerRegistry, RunContext

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

policies = st.builds(
    DownstreamPolicy,
    retry_ratio=st.floats(0, 2),
    min_retries_per_second=st.floats(0, 5),
    window=st.integers(1, 60).map(lambda s: timedelta(seconds=s)),
    failure_rate=st.floats(0.01, 1),
    min_volume=st.integers(1, 50),
    cooldown=st.integers(1, 60).map(lambda s: timedelta(seconds=s)),
    probes=st.integers(1, 5),
)


@given(policies, st.integers(0, 10_000))
def test_admitting_retries_until_refused_never_exceeds_the_budget(
    policy: DownstreamPolicy, firsts: int
) -> None:
    retries = 0
    while retry_allowed(policy, firsts=firsts, retries=retries):
        retries += 1
    bound = policy.retry_ratio * firsts + policy.min_retries_per_second * policy.window.total_seconds()
    assert retries <= bound
    assert retries == retry_allowance(policy, firsts=firsts)
    # The budget is spent whole: the last refusal is exactly one past the bound.
    assert retries + 1 > bound


@given(policies, st.integers(0, 5000), st.integers(0, 5000))
def test_more_first_attempts_never_shrink_the_budget(policy: DownstreamPolicy, a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert retry_allowance(policy, firsts=low) <= retry_allowance(policy, firsts=high)


def test_the_floor_allows_retries_with_no_traffic_and_the_ratio_scales() -> None:
    policy = DownstreamPolicy(retry_ratio=0.2, min_retries_per_second=1.0, window=timedelta(seconds=10))
    assert retry_allowance(policy, firsts=0) == 10
    assert retry_allowance(policy, firsts=100) == 30
    assert not retry_allowed(policy, firsts=100, retries=30)


def test_first_attempts_are_never_refused_by_the_budget() -> None:
    policy = DownstreamPolicy(retry_ratio=0, min_retries_per_second=0)
    assert admit(policy, Breaker(), now=T0, retry=False, firsts=0, retries=10**6).admitted
    refused = admit(policy, Breaker(), now=T0, retry=True, firsts=0, retries=0)
    assert not refused.admitted
    assert refused.reason == "budget_exhausted"
    assert refused.retry_at == T0 + policy.window


def test_the_breaker_opens_on_the_failure_rate_only_past_the_minimum_volume() -> None:
    policy = DownstreamPolicy(failure_rate=0.5, min_volume=10)
    closed = Breaker()
    assert observe(policy, closed, now=T0, ok=False, probe=False, successes=0, failures=9) == closed
    assert observe(policy, closed, now=T0, ok=False, probe=False, successes=6, failures=5) == closed
    assert observe(policy, closed, now=T0, ok=False, probe=False, successes=5, failures=5) == Breaker(
        "open", T0
    )
    # A success never opens it, whatever the window says.
    assert observe(policy, closed, now=T0, ok=True, probe=False, successes=1, failures=99) == closed


def test_open_half_open_closed_cycle() -> None:
    policy = DownstreamPolicy(cooldown=timedelta(seconds=10), probes=2)
    opened = Breaker("open", T0)
    early = admit(policy, opened, now=T0 + timedelta(seconds=9), retry=False, firsts=0, retries=0)
    assert (early.admitted, early.reason, early.retry_at) == (
        False,
        "circuit_open",
        T0 + timedelta(seconds=10),
    )
    t = T0 + timedelta(seconds=10)
    one = admit(policy, opened, now=t, retry=True, firsts=0, retries=10**6)
    assert one.admitted
    assert one.probe
    assert one.breaker == Breaker("half_open", T0, 1, t)
    two = admit(policy, one.breaker, now=t, retry=False, firsts=0, retries=0)
    assert two.admitted
    assert two.probe
    assert two.breaker.probes == 2
    third = admit(policy, two.breaker, now=t, retry=False, firsts=0, retries=0)
    assert not third.admitted
    assert third.reason == "probing"
    # A non-probe's late result changes nothing; a probe's decides.
    assert observe(policy, two.breaker, now=t, ok=True, probe=False, successes=1, failures=0) == two.breaker
    assert observe(policy, two.breaker, now=t, ok=True, probe=True, successes=1, failures=0) == Breaker()
    assert observe(policy, two.breaker, now=t, ok=False, probe=True, successes=0, failures=1) == Breaker(
        "open", t
    )


def test_probes_that_never_answer_are_written_off_after_a_cooldown() -> None:
    policy = DownstreamPolicy(cooldown=timedelta(seconds=10), probes=1)
    stuck = Breaker("half_open", T0, probes=1, probed_at=T0)
    assert not admit(policy, stuck, now=T0 + timedelta(seconds=9), retry=False, firsts=0, retries=0).admitted
    later = T0 + timedelta(seconds=10)
    again = admit(policy, stuck, now=later, retry=False, firsts=0, retries=0)
    assert again.admitted
    assert again.probe
    assert again.breaker == Breaker("half_open", T0, 1, later)


events = st.lists(
    st.tuples(
        st.sampled_from(["admit", "observe"]),
        st.integers(0, 30),  # seconds since the previous event
        st.booleans(),  # retry / ok
        st.integers(0, 100),
        st.integers(0, 100),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(policies, events)
def test_breaker_invariants_over_any_sequence(
    policy: DownstreamPolicy, steps: list[tuple[str, int, bool, int, int]]
) -> None:
    breaker = Breaker()
    now = T0
    probes_out: int = 0
    for op, gap, flag, x, y in steps:
        now += timedelta(seconds=gap)
        if op == "admit":
            before = breaker
            decision = admit(policy, breaker, now=now, retry=flag, firsts=x, retries=y)
            breaker = decision.breaker
            if before.state == "open" and before.opened_at and now < before.opened_at + policy.cooldown:
                assert not decision.admitted  # nothing gets through an open breaker in its cool-down
            if decision.probe:
                assert decision.admitted
                assert breaker.state == "half_open"
                probes_out += 1
            if not decision.admitted:
                assert decision.retry_at is not None
                assert decision.retry_at > now - timedelta(seconds=1)
            if breaker.state == "closed" and decision.admitted and flag:
                assert retry_allowed(policy, firsts=x, retries=y)
        else:
            probe = breaker.state == "half_open" and probes_out > 0
            after = observe(policy, breaker, now=now, ok=flag, probe=probe, successes=x, failures=y)
            if probe:
                probes_out -= 1
                assert after == (Breaker() if flag else Breaker("open", now))
            if after.state == "open" and breaker.state != "open":
                assert not flag
                assert after.opened_at == now
            breaker = after
        assert breaker.probes <= policy.probes
        assert breaker.state != "open" or breaker.opened_at is not None


def test_policy_refuses_impossible_settings() -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        DownstreamPolicy(failure_rate=0)
    with pytest.raises(ValueError, match="probes"):
        DownstreamPolicy(probes=0)


def test_handlers_declare_their_downstreams() -> None:
    reg = HandlerRegistry()

    async def pay(ctx: RunContext) -> None:
        raise DownstreamUnavailable("bank-api")

    reg.register("payouts.pay", pay, downstreams=["bank-api", "ledger", "bank-api"])
    assert reg.downstreams("payouts.pay") == ("bank-api", "ledger")
    assert reg.downstreams("unknown") == ()
    err = DownstreamUnavailable("bank-api")
    assert isinstance(err, TransientError)
    assert err.downstream == "bank-api"
    assert "bank-api" in str(err)


def test_an_operators_open_holds_past_every_cooldown_and_ignores_results() -> None:
    policy = DownstreamPolicy(cooldown=timedelta(seconds=10))
    held_open = Breaker("open", T0, manual=True)
    for later in (timedelta(seconds=1), timedelta(seconds=10), timedelta(days=3)):
        decision = admit(policy, held_open, now=T0 + later, retry=False, firsts=0, retries=0)
        assert not decision.admitted
        assert decision.reason == "operator_open"
        assert decision.breaker == held_open  # no half-open, no probe
        # It looks again only minutes later: the close brings held runs forward by itself.
        assert decision.retry_at == T0 + later + OPERATOR_OPEN_RECHECK
    # A call admitted before the operator opened it reports back: nothing moves.
    assert observe(policy, held_open, now=T0, ok=True, probe=True, successes=1, failures=0) == held_open


def test_a_downstreams_own_settings_lie_over_the_defaults() -> None:
    defaults = DownstreamPolicy()
    own = with_settings(defaults, DownstreamSettings(cooldown_seconds=60, failure_rate=0.3, probes=2))
    assert own.cooldown == timedelta(seconds=60)
    assert own.failure_rate == 0.3
    assert own.probes == 2
    assert own.window == defaults.window  # left out: the default
    assert own.retry_ratio == defaults.retry_ratio
    assert with_settings(defaults, DownstreamSettings()) is defaults


def test_every_setting_of_the_contract_reaches_the_policy() -> None:
    # core names the settings it reads (a protocol: it imports no contract); a field the contract
    # gains must be read too, or an operator's setting would be accepted and silently ignored.
    chosen = {
        "retry_ratio": (0.7, "retry_ratio", 0.7),
        "min_retries_per_second": (3.0, "min_retries_per_second", 3.0),
        "window_seconds": (20.0, "window", timedelta(seconds=20)),
        "failure_rate": (0.3, "failure_rate", 0.3),
        "min_volume": (20, "min_volume", 20),
        "cooldown_seconds": (30.0, "cooldown", timedelta(seconds=30)),
        "probes": (2, "probes", 2),
    }
    assert set(DownstreamSettings.model_fields) == set(chosen)
    for setting, (value, field, expected) in chosen.items():
        policy = with_settings(DownstreamPolicy(), DownstreamSettings.model_validate({setting: value}))
        assert getattr(policy, field) == expected, setting


def test_settings_out_of_range_are_refused_by_the_contract() -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        DownstreamSettings.model_validate({"failure_rate": 2})
    with pytest.raises(ValueError, match="extra"):
        DownstreamSettings.model_validate({"cooldown": 5})
