"""Retry budgets and circuit breakers per downstream, shared by every claimer through PostgreSQL.

Before a handler that declared downstreams runs, `Gate.admit` asks each of them (in one
transaction, rows locked in name order so two claimers cannot deadlock): an open breaker, a
half-open one whose probes are out, or a spent retry budget refuses the attempt, and the run is
*held*: recorded as retrying with a durable timer (the ticker's StartTimer) at the instant worth
trying again, with its attempt given back (round_start moves up with attempt), so an outage never
burns attempts or dead-letters a run. After the handler, `Gate.settle` records each downstream's
result; a failure that leaves a breaker open holds the run the same way instead of retrying it.

Held runs come back in slot order per job: a run is not admitted while an earlier slot of its job
still waits for the same downstream (it is held again, briefly, with reason `slot_order`), and a
breaker that closes brings every run held for it forward, in slot order, spread over one cool-down
(`Changes.record`).

The invariant: every decision on a downstream happens under its `downstreams` row lock, in the
transaction that reads and writes its window counters (see 0004_downstreams.sql), so all claimers
agree on the breaker state and admitted retries never exceed the budget, whatever their number.
Every change of state is a `downstream_changes` row and a DownstreamChanged event staged in that
same transaction. Rows are the truth; nothing is cached in a process.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slotflow.contracts import DownstreamChanged, DownstreamReported, DownstreamSettings, wrap
from slotflow.contracts.topics import DOWNSTREAM_EVENTS
from slotflow.core.downstreams import (
    Admission,
    Breaker,
    DownstreamPolicy,
    admit,
    observe,
    retry_allowance,
    with_settings,
)
from slotflow.core.identity import slot_label
from slotflow.core.retry import is_retryable
from slotflow.core.stopping import sleep_or_stop
from slotflow.errors import DownstreamUnavailable, TransientStorageError
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import sql
from slotflow.principals import Signer
from slotflow.settings import KafkaSettings
from slotflow_claimer.events import RunEvents
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.outcomes import Outcome
from slotflow_claimer.runs import Run
from slotflow_claimer.sql import (
    DOWNSTREAM_ADMITTED,
    DOWNSTREAM_CHANGED,
    DOWNSTREAM_CONFIGURE,
    DOWNSTREAM_COUNT,
    DOWNSTREAM_COUNTS,
    DOWNSTREAM_DUE_REPORTS,
    DOWNSTREAM_EARLIER_HELD,
    DOWNSTREAM_ENSURE,
    DOWNSTREAM_HELD_COUNT,
    DOWNSTREAM_HELD_COUNTS,
    DOWNSTREAM_HELD_RUNS,
    DOWNSTREAM_LOCK,
    DOWNSTREAM_MOVE,
    DOWNSTREAM_PRUNE,
    DOWNSTREAM_REPORTED,
)

log = logging.getLogger(__name__)

_STATE_VALUE = {"closed": 0, "half_open": 1, "open": 2}
#: Most held runs one closing breaker brings forward (oldest slots first), in the transaction that
#: closes it, under the downstream's row lock: each is a stored JobDue read and two timer commands
#: staged. The rest return on their own timers, and the slot-order gate still orders them.
RESUME_LIMIT = 2_000


#: Why a breaker moved, from where to where (the automatic moves; an operator's carry their own).
_CAUSES = {
    ("closed", "open"): "failures",
    ("open", "half_open"): "cooldown",
    ("half_open", "closed"): "probe_succeeded",
    ("half_open", "open"): "probe_failed",
}


@dataclass(frozen=True, slots=True)
class Pass:
    """The attempt may run; ``probes`` are the downstreams it probes (half-open breakers)."""

    probes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Locked:
    """A downstream row as locked: its breaker, its own settings and the policy they make."""

    breaker: Breaker
    settings: DownstreamSettings
    policy: DownstreamPolicy


@functools.lru_cache(maxsize=256)
def _settings(text: str) -> DownstreamSettings:
    return DownstreamSettings.model_validate_json(text)


def _breaker(row: object) -> Breaker:
    r: dict[str, object] = dict(row)  # type: ignore[call-overload]
    return Breaker(r["state"], r["opened_at"], r["probes"], r["probed_at"], bool(r["manual"]))  # type: ignore[arg-type]


class Changes:
    """Records a downstream's change in the caller's transaction: the `downstream_changes` row, the
    DownstreamChanged event, and on closing, the held runs brought forward in slot order."""

    def __init__(
        self,
        *,
        schema: str,
        owner: str,
        kafka: KafkaSettings,
        metrics: ClaimerMetrics,
        signer: Signer | None = None,
    ) -> None:
        self._schema = schema
        self._owner = owner
        #: Where DownstreamChanged and DownstreamReported go.
        self.topic = kafka.topic(DOWNSTREAM_EVENTS)
        self._runs = RunEvents(kafka, signer=signer)
        self._metrics = metrics

    async def record(
        self,
        conn: Conn,
        name: str,
        before: Breaker,
        after: Breaker,
        *,
        cause: str,
        reason: str,
        settings: DownstreamSettings,
        policy: DownstreamPolicy,
        command_id: str | None = None,
    ) -> list[Staged]:
        """The change's row and what it stages (the caller appends them to the outbox)."""
        row = await conn.fetchrow(
            sql(DOWNSTREAM_CHANGED, self._schema),
            name,
            before.state,
            after.state,
            self._owner,
            cause,
            reason,
            command_id,
        )
        if row is None:  # INSERT ... RETURNING returns its row or raises
            raise TransientStorageError(f"downstream {name}: the change was not recorded")
        change_id, at = row["id"], row["at"]
        held = int(await conn.fetchval(sql(DOWNSTREAM_HELD_COUNT, self._schema), name))
        staged: list[Staged] = []
        if after.state == "closed" and (before.state != "closed" or before.manual):
            staged.extend(await self._resume(conn, name, at, policy.cooldown))
        event = DownstreamChanged(
            downstream=name,
            from_state=before.state,
            to_state=after.state,
            cause=cause,
            reason=reason[:2000],
            manual=after.manual,
            by=self._owner,
            command_id=command_id,
            held=held,
            settings=settings,
            at=at,
        )
        envelope = wrap(event, id=f"{name}/{change_id}", key=name, source="claimer", occurred_at=at)
        staged.append(Staged(self.topic, envelope))
        self._metrics.downstream_state.labels(name).set(_STATE_VALUE[after.state])
        if after.state != before.state:
            self._metrics.downstream_transitions.labels(name, after.state).inc()
        log.warning("downstream %s: circuit %s -> %s (%s) %s", name, before.state, after.state, cause, reason)
        return staged

    async def _resume(self, conn: Conn, name: str, at: datetime, spread: timedelta) -> list[Staged]:
        """Every run held for ``name``, brought forward in slot order over one cool-down."""
        rows = await conn.fetch(sql(DOWNSTREAM_HELD_RUNS, self._schema), name, RESUME_LIMIT)
        staged: list[Staged] = []
        for position, row in enumerate(rows):
            run = Run.from_row(row)
            resume_at = at + spread * (position / len(rows))
            staged.extend(self._runs.resume_timers(run, at, resume_at=resume_at))
        if rows:
            self._metrics.downstream_resumed.labels(name).inc(len(rows))
            log.info("downstream %s closed: %d held runs resume in slot order", name, len(rows))
        return staged


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
        kafka: KafkaSettings,
        wake_relay: Callable[[], None] | None = None,
        signer: Signer | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._policy = policy
        self._metrics = metrics
        self._rng = rng
        self._wake = wake_relay
        self.changes = Changes(schema=schema, owner=owner, kafka=kafka, metrics=metrics, signer=signer)
        # Decisions on one downstream serialise on its row lock anyway; letting every in-flight run
        # wait for it on a pooled connection would starve the heartbeat of connections (leases
        # would lapse), so each claimer queues here and holds at most two connections for it.
        self._slots = asyncio.Semaphore(2)

    @property
    def default_policy(self) -> DownstreamPolicy:
        return self._policy

    def policy_for(self, settings: DownstreamSettings) -> DownstreamPolicy:
        """The claimers' defaults with one downstream's own settings over them."""
        try:
            return with_settings(self._policy, settings)
        except ValueError as err:
            # Each field is bounded by the contract; a combination that is not a policy is refused
            # when configured, so this is a row written by hand: keep deciding with the defaults.
            log.warning("downstream settings %s ignored: %s", settings.model_dump(exclude_none=True), err)
            return self._policy

    async def lock(self, conn: Conn, names: Sequence[str]) -> tuple[dict[str, Locked], datetime]:
        """Lock (creating them if new) the rows of ``names``, in name order; and the database's now."""
        await conn.execute(sql(DOWNSTREAM_ENSURE, self._schema), list(names))
        rows = await conn.fetch(sql(DOWNSTREAM_LOCK, self._schema), list(names))
        locked: dict[str, Locked] = {}
        for row in rows:
            settings = _settings(row["settings"])
            locked[row["name"]] = Locked(_breaker(row), settings, self.policy_for(settings))
        return locked, rows[0]["now"]

    async def counts(self, conn: Conn, names: Sequence[str]) -> dict[str, dict[str, int]]:
        rows = await conn.fetch(
            sql(DOWNSTREAM_COUNTS, self._schema), list(names), self._policy.window.total_seconds()
        )
        return {row["name"]: dict(row) for row in rows}

    async def move(
        self,
        conn: Conn,
        name: str,
        locked: Locked,
        after: Breaker,
        *,
        cause: str | None = None,
        reason: str = "",
        command_id: str | None = None,
    ) -> list[Staged]:
        """Write ``after`` as the breaker of ``name``; a change of state is recorded and staged."""
        before = locked.breaker
        if after == before:
            return []
        await conn.execute(
            sql(DOWNSTREAM_MOVE, self._schema),
            name,
            after.state,
            after.opened_at,
            after.probes,
            after.probed_at,
            after.manual,
        )
        if after.state == before.state and after.manual == before.manual:
            return []  # probes counted, nothing a person would call a change
        return await self.changes.record(
            conn,
            name,
            before,
            after,
            cause=cause or _CAUSES.get((before.state, after.state), "changed"),
            reason=reason,
            settings=locked.settings,
            policy=locked.policy,
            command_id=command_id,
        )

    async def configure(self, conn: Conn, name: str, settings: DownstreamSettings) -> None:
        await conn.execute(
            sql(DOWNSTREAM_CONFIGURE, self._schema), name, settings.model_dump_json(exclude_none=True)
        )

    async def _stage(self, conn: Conn, staged: list[Staged]) -> None:
        if staged:
            await append_many(conn, schema=self._schema, items=staged)

    def _woken(self, staged: list[Staged]) -> None:
        if staged and self._wake is not None:
            self._wake()

    async def admit(self, run: Run, downstreams: Sequence[str]) -> Pass | Outcome:
        """A `Pass`, or the held outcome of a run that must wait for its downstreams."""
        names = sorted(set(downstreams))
        retry = run.attempt_in_round > 1
        staged: list[Staged] = []
        async with self._slots, self._pool.acquire() as conn, conn.transaction():
            locked, now = await self.lock(conn, names)
            counts = await self.counts(conn, names)
            decisions: dict[str, Admission] = {}
            for name in names:
                c = counts[name]
                policy = locked[name].policy
                decision = admit(
                    policy,
                    locked[name].breaker,
                    now=now,
                    retry=retry,
                    firsts=c["firsts"],
                    retries=c["retries"],
                )
                decisions[name] = decision
                if not decision.admitted:
                    # All or nothing: a refused attempt spends no other downstream's budget.
                    self._metrics.downstream_held.labels(name, decision.reason or "").inc()
                    retry_at = decision.retry_at or now + policy.cooldown
                    return self._hold(run, name, decision.reason or "circuit_open", retry_at, now, policy)
            earlier = await conn.fetchval(
                sql(DOWNSTREAM_EARLIER_HELD, self._schema), run.job_id, run.slot, run.run_id, names
            )
            if earlier:
                # An earlier slot of this job waits for the same downstream: it goes first. It
                # returns within its own spread, so look again shortly (nothing is spent).
                name = names[0]
                self._metrics.downstream_held.labels(name, "slot_order").inc()
                policy = locked[name].policy
                wait = min(policy.cooldown, timedelta(seconds=1))
                return self._hold(run, name, "slot_order", now + wait, now, policy, spread=wait)
            for name, decision in decisions.items():
                staged += await self.move(conn, name, locked[name], decision.breaker)
            zeros = [0] * len(names)
            await conn.execute(
                sql(DOWNSTREAM_COUNT, self._schema), names, int(not retry), int(retry), zeros, zeros
            )
            await conn.execute(sql(DOWNSTREAM_ADMITTED, self._schema), run.run_id, run.fence_token)
            await self._stage(conn, staged)
        self._woken(staged)
        return Pass(frozenset(n for n, d in decisions.items() if d.probe))

    async def settle(
        self, run: Run, downstreams: Sequence[str], passed: Pass, error: BaseException | None
    ) -> Outcome | None:
        """Record the attempt's result per downstream; a held outcome if a failure left one open."""
        failed = _failed(run, downstreams, error)
        names = sorted(set(downstreams) | failed)
        staged: list[Staged] = []
        async with self._slots, self._pool.acquire() as conn, conn.transaction():
            locked, now = await self.lock(conn, names)
            await conn.execute(
                sql(DOWNSTREAM_COUNT, self._schema),
                names,
                0,
                0,
                [int(n not in failed) for n in names],
                [int(n in failed) for n in names],
            )
            counts = await self.counts(conn, names)
            opened: str | None = None
            for name in names:
                c = counts[name]
                after = observe(
                    locked[name].policy,
                    locked[name].breaker,
                    now=now,
                    ok=name not in failed,
                    probe=name in passed.probes,
                    successes=c["successes"],
                    failures=c["failures"],
                )
                calls = c["successes"] + c["failures"]
                window = locked[name].policy.window.total_seconds()
                reason = (
                    f"probe by run {run.run_id} {'failed' if name in failed else 'succeeded'}"
                    if name in passed.probes
                    else f"{c['failures']} of {calls} calls failed in the last {window:g} s"
                )
                staged += await self.move(conn, name, locked[name], after, reason=reason)
                if name in failed and after.state == "open" and opened is None:
                    opened = name
            await conn.execute(
                sql(DOWNSTREAM_PRUNE, self._schema), names, self._policy.window.total_seconds()
            )
            await self._stage(conn, staged)
        self._woken(staged)
        if opened is None:
            return None
        self._metrics.downstream_held.labels(opened, "circuit_open").inc()
        policy = locked[opened].policy
        return self._hold(run, opened, "circuit_open", now + policy.cooldown, now, policy, error=error)

    def _hold(
        self,
        run: Run,
        downstream: str,
        reason: str,
        retry_at: datetime,
        now: datetime,
        policy: DownstreamPolicy,
        *,
        error: BaseException | None = None,
        spread: timedelta | None = None,
    ) -> Outcome:
        # Spread the wake-ups over one more cool-down: held runs must not all return at one instant.
        spread_seconds = (spread or policy.cooldown).total_seconds() * self._rng.random()
        delay = retry_at - now + timedelta(seconds=spread_seconds)
        held = error if error is not None else DownstreamUnavailable(downstream, f"held: {reason}")
        return Outcome(
            run,
            "held",
            error=held,
            delay=max(delay, timedelta(milliseconds=1)),
            held_reason=f"{reason}:{downstream}",
            retryable=True,
        )

    # -- reports ------------------------------------------------------------------------------

    async def report(self, interval: float) -> int:
        """Stage a DownstreamReported for every downstream not reported within ``interval`` (by
        any claimer), except an idle one already reported idle; returns how many."""
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(sql(DOWNSTREAM_DUE_REPORTS, self._schema), interval)
            if not rows:
                return 0
            names = [row["name"] for row in rows]
            counts = await self.counts(conn, names)
            held = {r["name"]: r["held"] for r in await conn.fetch(sql(DOWNSTREAM_HELD_COUNTS, self._schema))}
            topic = self.changes.topic
            staged: list[Staged] = []
            reported: list[str] = []
            idle_flags: list[bool] = []
            for row in rows:
                name, now = row["name"], row["now"]
                settings = _settings(row["settings"])
                policy = self.policy_for(settings)
                c = counts[name]
                idle = (
                    row["state"] == "closed"
                    and not row["manual"]
                    and not any(c[k] for k in ("firsts", "retries", "successes", "failures"))
                    and not held.get(name, 0)
                )
                if idle and row["reported_idle"] and row["changed_at"] <= row["reported_at"]:
                    continue  # said once already, and nothing changed since
                reported.append(name)
                idle_flags.append(idle)
                message = DownstreamReported(
                    downstream=name,
                    state=row["state"],
                    manual=row["manual"],
                    window_seconds=policy.window.total_seconds(),
                    first_attempts=c["firsts"],
                    retries=c["retries"],
                    retry_allowance=retry_allowance(policy, firsts=c["firsts"]),
                    successes=c["successes"],
                    failures=c["failures"],
                    held=held.get(name, 0),
                    settings=settings,
                    changed_at=row["changed_at"],
                    at=now,
                )
                envelope = wrap(
                    message,
                    id=f"{name}/reported/{slot_label(now)}",
                    key=name,
                    source="claimer",
                    occurred_at=now,
                )
                staged.append(Staged(topic, envelope))
            if reported:
                await conn.execute(sql(DOWNSTREAM_REPORTED, self._schema), reported, idle_flags)
                await append_many(conn, schema=self._schema, items=staged)
        self._woken(staged)
        return len(staged)

    async def report_loop(self, stop: asyncio.Event, interval: float) -> None:
        """Report every downstream about every ``interval`` seconds (shared by all claimers)."""
        while not stop.is_set():
            try:
                await self.report(interval)
            except Exception as err:  # noqa: BLE001 - advisory: the next interval reports again
                log.warning("claimer %s: could not report downstreams: %r", self._owner, err)
            if await sleep_or_stop(stop, interval / 2):
                return


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
