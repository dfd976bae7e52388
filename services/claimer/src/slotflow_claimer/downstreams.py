"""Retry budgets and circuit breakers per downstream, shared by every claimer through PostgreSQL.

Before a handler that declared downstreams runs, `Gate.admit` asks each of them (in one
transaction, rows locked in name order so two claimers cannot deadlock): an open breaker, a
half-open one whose probes are out, or a spent retry budget refuses the attempt, and the run is
*held*: recorded as retrying with a durable timer (the ticker's StartTimer) at the instant worth
trying again, with its attempt given back (round_start moves up with attempt), so an outage never
burns attempts or dead-letters a run. After the handler, `Gate.settle` records each downstream's
result; a failure that leaves a breaker open holds the run the same way instead of retrying it.

The invariant: every decision on a downstream happens under its `downstreams` row lock, in the
transaction that reads and writes its window counters (see 0004_downstreams.sql), so all claimers
agree on the breaker state and admitted retries never exceed the budget, whatever their number.
Rows are the truth; nothing is cached in a process.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slotflow.core.downstreams import Admission, Breaker, DownstreamPolicy, admit, observe
from slotflow.core.retry import is_retryable
from slotflow.errors import DownstreamUnavailable
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import sql
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.outcomes import Outcome
from slotflow_claimer.runs import Run

log = logging.getLogger(__name__)

_STATE_VALUE = {"closed": 0, "half_open": 1, "open": 2}

_ENSURE = "INSERT INTO {schema}.downstreams (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING"
# Taken before any counter is read: the lock serialises every claimer's decisions on these rows.
_LOCK = """
SELECT name, state, opened_at, probes, probed_at, window_since, now() AS now
  FROM {schema}.downstreams WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE
"""
# The window: buckets newer than `now() - window`, and none from before the breaker last closed.
_COUNTS = """
SELECT d.name, coalesce(sum(w.firsts), 0)::int AS firsts, coalesce(sum(w.retries), 0)::int AS retries,
       coalesce(sum(w.successes), 0)::int AS successes, coalesce(sum(w.failures), 0)::int AS failures
  FROM {schema}.downstreams d
  LEFT JOIN {schema}.downstream_window w
         ON w.name = d.name AND w.bucket > now() - make_interval(secs => $2)
        AND w.bucket >= date_trunc('second', d.window_since)
 WHERE d.name = ANY($1::text[]) GROUP BY d.name
"""
_COUNT = """
INSERT INTO {schema}.downstream_window AS w (name, bucket, firsts, retries, successes, failures)
SELECT unnest($1::text[]), date_trunc('second', now()), $2::int, $3::int, unnest($4::int[]), unnest($5::int[])
ON CONFLICT (name, bucket) DO UPDATE SET
    firsts = w.firsts + EXCLUDED.firsts, retries = w.retries + EXCLUDED.retries,
    successes = w.successes + EXCLUDED.successes, failures = w.failures + EXCLUDED.failures
"""
_PRUNE = """
DELETE FROM {schema}.downstream_window
 WHERE name = ANY($1::text[]) AND bucket < now() - make_interval(secs => $2 * 2)
"""
_MOVE = """
UPDATE {schema}.downstreams SET state = $2, opened_at = $3, probes = $4, probed_at = $5,
       window_since = CASE WHEN $2 = 'closed' AND state <> 'closed' THEN now() ELSE window_since END,
       changed_at = CASE WHEN state <> $2 THEN now() ELSE changed_at END
 WHERE name = $1
"""
_CHANGED = (
    "INSERT INTO {schema}.downstream_changes (name, from_state, to_state, owner) VALUES ($1, $2, $3, $4)"
)


@dataclass(frozen=True, slots=True)
class Pass:
    """The attempt may run; ``probes`` are the downstreams it probes (half-open breakers)."""

    probes: frozenset[str] = frozenset()


def _breaker(row: object) -> Breaker:
    r: dict[str, object] = dict(row)  # type: ignore[call-overload]
    return Breaker(r["state"], r["opened_at"], r["probes"], r["probed_at"])  # type: ignore[arg-type]


class Gate:
    """Admits attempts against downstreams and records their results (one per claimer)."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        policy: DownstreamPolicy,
        metrics: ClaimerMetrics,
        rng: random.Random,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._policy = policy
        self._metrics = metrics
        self._rng = rng
        # Decisions on one downstream serialise on its row lock anyway; letting every in-flight run
        # wait for it on a pooled connection would starve the heartbeat of connections (leases
        # would lapse), so each claimer queues here and holds at most two connections for it.
        self._slots = asyncio.Semaphore(2)

    async def _lock(self, conn: Conn, names: Sequence[str]) -> tuple[dict[str, Breaker], datetime]:
        await conn.execute(sql(_ENSURE, self._schema), list(names))
        rows = await conn.fetch(sql(_LOCK, self._schema), list(names))
        return {row["name"]: _breaker(row) for row in rows}, rows[0]["now"]

    async def _counts(self, conn: Conn, names: Sequence[str]) -> dict[str, dict[str, int]]:
        rows = await conn.fetch(sql(_COUNTS, self._schema), list(names), self._policy.window.total_seconds())
        return {row["name"]: dict(row) for row in rows}

    async def _move(self, conn: Conn, name: str, before: Breaker, after: Breaker) -> None:
        if after == before:
            return
        await conn.execute(
            sql(_MOVE, self._schema),
            name,
            after.state,
            after.opened_at,
            after.probes,
            after.probed_at,
        )
        self._metrics.downstream_state.labels(name).set(_STATE_VALUE[after.state])
        if after.state != before.state:
            await conn.execute(sql(_CHANGED, self._schema), name, before.state, after.state, self._owner)
            self._metrics.downstream_transitions.labels(name, after.state).inc()
            log.warning("downstream %s: circuit %s -> %s", name, before.state, after.state)

    async def admit(self, run: Run, downstreams: Sequence[str]) -> Pass | Outcome:
        """A `Pass`, or the held outcome of a run that must wait for its downstreams."""
        names = sorted(set(downstreams))
        retry = run.attempt_in_round > 1
        async with self._slots, self._pool.acquire() as conn, conn.transaction():
            breakers, now = await self._lock(conn, names)
            counts = await self._counts(conn, names)
            decisions: dict[str, Admission] = {}
            for name in names:
                c = counts[name]
                decision = admit(
                    self._policy,
                    breakers[name],
                    now=now,
                    retry=retry,
                    firsts=c["firsts"],
                    retries=c["retries"],
                )
                decisions[name] = decision
                if not decision.admitted:
                    # All or nothing: a refused attempt spends no other downstream's budget.
                    self._metrics.downstream_held.labels(name, decision.reason or "").inc()
                    retry_at = decision.retry_at or now + self._policy.cooldown
                    return self._hold(run, name, decision.reason or "circuit_open", retry_at, now)
            for name, decision in decisions.items():
                await self._move(conn, name, breakers[name], decision.breaker)
            zeros = [0] * len(names)
            await conn.execute(sql(_COUNT, self._schema), names, int(not retry), int(retry), zeros, zeros)
        return Pass(frozenset(n for n, d in decisions.items() if d.probe))

    async def settle(
        self, run: Run, downstreams: Sequence[str], passed: Pass, error: BaseException | None
    ) -> Outcome | None:
        """Record the attempt's result per downstream; a held outcome if a failure left one open."""
        failed = _failed(run, downstreams, error)
        names = sorted(set(downstreams) | failed)
        async with self._slots, self._pool.acquire() as conn, conn.transaction():
            breakers, now = await self._lock(conn, names)
            await conn.execute(
                sql(_COUNT, self._schema),
                names,
                0,
                0,
                [int(n not in failed) for n in names],
                [int(n in failed) for n in names],
            )
            counts = await self._counts(conn, names)
            opened: str | None = None
            for name in names:
                c = counts[name]
                after = observe(
                    self._policy,
                    breakers[name],
                    now=now,
                    ok=name not in failed,
                    probe=name in passed.probes,
                    successes=c["successes"],
                    failures=c["failures"],
                )
                await self._move(conn, name, breakers[name], after)
                if name in failed and after.state == "open" and opened is None:
                    opened = name
            await conn.execute(sql(_PRUNE, self._schema), names, self._policy.window.total_seconds())
        if opened is None:
            return None
        self._metrics.downstream_held.labels(opened, "circuit_open").inc()
        return self._hold(run, opened, "circuit_open", now + self._policy.cooldown, now, error=error)

    def _hold(
        self,
        run: Run,
        downstream: str,
        reason: str,
        retry_at: datetime,
        now: datetime,
        *,
        error: BaseException | None = None,
    ) -> Outcome:
        # Spread the wake-ups over one more cool-down: held runs must not all return at one instant.
        spread = self._policy.cooldown.total_seconds() * self._rng.random()
        delay = retry_at - now + timedelta(seconds=spread)
        held = error if error is not None else DownstreamUnavailable(downstream, f"held: {reason}")
        return Outcome(
            run,
            "held",
            error=held,
            delay=max(delay, timedelta(milliseconds=1)),
            held_reason=f"{reason}:{downstream}",
            retryable=True,
        )


def _failed(run: Run, downstreams: Sequence[str], error: BaseException | None) -> set[str]:
    """The downstreams an attempt's error blames: the named one, or all declared for a transient error.

    A permanent error is the downstream answering no: it counts as a success for its breaker.
    """
    if error is None:
        return set()
    if isinstance(error, DownstreamUnavailable):
        return {error.downstream}
    if is_retryable(error, non_retryable=run.retry.non_retryable):
        return set(downstreams)
    return set()
