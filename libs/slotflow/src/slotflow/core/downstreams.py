"""Retry budgets and circuit breakers per downstream: the arithmetic and the state machine (pure).

A downstream is a dependency a handler names (``@handler("payouts.pay", downstreams=["bank-api"])``).
Full jitter spreads retries against a dead dependency but does not bound them; these two do:

- The retry budget (Finagle's): over a sliding window, retries may be at most ``ratio`` of the first
  attempts plus a floor of ``min_per_second * window``, so an outage adds at most ``ratio`` extra
  load on top of the real traffic, and a quiet downstream can still be retried a little.
- The circuit breaker: ``closed`` until the failure rate over the window reaches ``failure_rate``
  with at least ``min_volume`` calls; then ``open`` for ``cooldown`` (nothing is attempted);
  then ``half_open``: ``probes`` attempts go through; one success closes it, one failure opens it
  again for another cool-down.

The claimer keeps the state in PostgreSQL (slotflow_claimer.downstreams) and applies these
functions under the downstream's row lock, so every claimer takes the same decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, Protocol

BreakerState = Literal["closed", "open", "half_open"]

#: How long a run held by an operator's open waits before it looks again. Long, because closing
#: brings every held run forward at once (in slot order); a short recheck would only make every
#: held run bounce through the claimer and the ticker for the whole maintenance.
OPERATOR_OPEN_RECHECK = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class DownstreamPolicy:
    """Settings of one downstream's budget and breaker (the claimer applies one to all)."""

    #: Retries allowed per first attempt over the window (Finagle's percentCanRetry).
    retry_ratio: float = 0.2
    #: Retries allowed per second regardless of traffic (the floor).
    min_retries_per_second: float = 1.0
    window: timedelta = timedelta(seconds=10)
    #: Failures / calls over the window that open the breaker.
    failure_rate: float = 0.5
    #: Fewest calls in the window before the failure rate is trusted.
    min_volume: int = 10
    cooldown: timedelta = timedelta(seconds=10)
    #: Attempts let through while half-open.
    probes: int = 1

    def __post_init__(self) -> None:
        if self.retry_ratio < 0 or self.min_retries_per_second < 0:
            raise ValueError("retry_ratio and min_retries_per_second must be >= 0")
        if self.window <= timedelta(0) or self.cooldown <= timedelta(0):
            raise ValueError("window and cooldown must be positive")
        if not 0 < self.failure_rate <= 1:
            raise ValueError("failure_rate must be in (0, 1]")
        if self.min_volume < 1 or self.probes < 1:
            raise ValueError("min_volume and probes must be >= 1")


class DownstreamOverrides(Protocol):
    """One downstream's own settings, None where the claimers' default stands
    (`slotflow.contracts.DownstreamSettings` is one; core knows no message, docs/development.md)."""

    @property
    def retry_ratio(self) -> float | None: ...
    @property
    def min_retries_per_second(self) -> float | None: ...
    @property
    def window_seconds(self) -> float | None: ...
    @property
    def failure_rate(self) -> float | None: ...
    @property
    def min_volume(self) -> int | None: ...
    @property
    def cooldown_seconds(self) -> float | None: ...
    @property
    def probes(self) -> int | None: ...


#: Each override and the policy field it sets; the `_seconds` ones are durations in the policy.
_OVERRIDES = (
    ("retry_ratio", "retry_ratio"),
    ("min_retries_per_second", "min_retries_per_second"),
    ("window_seconds", "window"),
    ("failure_rate", "failure_rate"),
    ("min_volume", "min_volume"),
    ("cooldown_seconds", "cooldown"),
    ("probes", "probes"),
)
_SECONDS = frozenset({"window_seconds", "cooldown_seconds"})


def with_settings(policy: DownstreamPolicy, settings: DownstreamOverrides) -> DownstreamPolicy:
    """``policy`` (the claimers' defaults) with one downstream's own settings laid over it.

    Raises:
        ValueError: the combination is not a policy (the contract bounds each field alone).
    """
    changes: dict[str, object] = {}
    for override, field in _OVERRIDES:
        value = getattr(settings, override)
        if value is not None:
            changes[field] = timedelta(seconds=value) if override in _SECONDS else value
    return replace(policy, **changes) if changes else policy  # type: ignore[arg-type]


def retry_allowance(policy: DownstreamPolicy, *, firsts: int, window_seconds: float | None = None) -> int:
    """How many retries the window may hold, given ``firsts`` first attempts in it."""
    seconds = policy.window.total_seconds() if window_seconds is None else window_seconds
    return math.floor(policy.retry_ratio * firsts + policy.min_retries_per_second * seconds)


def retry_allowed(policy: DownstreamPolicy, *, firsts: int, retries: int) -> bool:
    """Whether one more retry fits the budget (``retries`` already admitted in the window)."""
    return retries + 1 <= retry_allowance(policy, firsts=firsts)


@dataclass(frozen=True, slots=True)
class Breaker:
    """A downstream's breaker as stored: state, when it last opened, probes admitted half-open."""

    state: BreakerState = "closed"
    opened_at: datetime | None = None
    probes: int = 0
    #: When the current probes went out (half-open): probes that never report back (their claimer
    #: died) are written off after a cool-down and new ones go out.
    probed_at: datetime | None = None
    #: Opened by an operator: it stays open (no cool-down, no probes) until one closes it.
    manual: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether an attempt may call the downstream now; if not, until when it should wait."""

    admitted: bool
    breaker: Breaker
    #: The attempt is the half-open breaker's probe: its result decides the breaker.
    probe: bool = False
    #: For a refused attempt: why (``circuit_open``, ``operator_open``, ``probing``,
    #: ``budget_exhausted``).
    reason: str | None = None
    #: For a refused attempt: the earliest instant worth trying again.
    retry_at: datetime | None = None


def admit(
    policy: DownstreamPolicy,
    breaker: Breaker,
    *,
    now: datetime,
    retry: bool,
    firsts: int,
    retries: int,
) -> Admission:
    """Decide one attempt against ``breaker`` and the window's counters (pure)."""
    if breaker.state == "open" and breaker.manual:
        # Only an operator closes it, and the close brings held runs forward: look again much later.
        recheck = max(policy.cooldown, OPERATOR_OPEN_RECHECK)
        return Admission(False, breaker, reason="operator_open", retry_at=now + recheck)
    if breaker.state == "open":
        # An open breaker always has opened_at; a stored row without one opened "now".
        reopen = (breaker.opened_at or now) + policy.cooldown
        if now < reopen:
            return Admission(False, breaker, reason="circuit_open", retry_at=reopen)
        breaker = Breaker("half_open", breaker.opened_at, probes=0, probed_at=now)
    if breaker.state == "half_open":
        if breaker.probed_at is not None and now >= breaker.probed_at + policy.cooldown:
            breaker = replace(breaker, probes=0, probed_at=now)
        if breaker.probes < policy.probes:
            return Admission(True, replace(breaker, probes=breaker.probes + 1), probe=True)
        # The probes are out: wait about a cool-down for their verdict.
        return Admission(False, breaker, reason="probing", retry_at=now + policy.cooldown)
    if retry and not retry_allowed(policy, firsts=firsts, retries=retries):
        # The window slides: some of its retries leave it within one window.
        return Admission(False, breaker, reason="budget_exhausted", retry_at=now + policy.window)
    return Admission(True, breaker)


def observe(
    policy: DownstreamPolicy,
    breaker: Breaker,
    *,
    now: datetime,
    ok: bool,
    probe: bool,
    successes: int,
    failures: int,
) -> Breaker:
    """The breaker after one call's result (``successes``/``failures`` in the window include it)."""
    if breaker.manual:
        return breaker  # held open by an operator: results of calls already out change nothing
    if breaker.state == "half_open":
        if not probe:
            return breaker  # a call admitted before the breaker opened: its result is old news
        return Breaker("closed") if ok else Breaker("open", now)
    if breaker.state == "open":
        return breaker
    calls = successes + failures
    if not ok and calls >= policy.min_volume and failures >= policy.failure_rate * calls:
        return Breaker("open", now)
    return breaker
