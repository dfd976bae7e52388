"""Claiming due schedules and timers: one transaction claims rows with FOR UPDATE SKIP LOCKED,
stages one JobDue per slot (and a SlotSkipped per slot not run) in the outbox, and advances each
row's grid. Nothing is fired unless that transaction commits, and nothing it fired is due again
after it commits, so with any number of tickers each slot is staged once.
"""

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from slotflow import tracing
from slotflow.contracts import FireJobDue, ScheduleResumed
from slotflow.core.identity import slot_label
from slotflow.errors import SlotflowError
from slotflow.pg.instants import to_micros
from slotflow.pg.outbox import traced
from slotflow.pg.pool import Conn, Pool
from slotflow_ticker.events import EventFactory, Outgoing, stage_all
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.planning import ClaimPlan, Position, plan_due
from slotflow_ticker.rows import ScheduleRow, parse_action
from slotflow_ticker.sql import Queries

log = logging.getLogger(__name__)


class BacklogTooLong(SlotflowError):
    """A schedule has more unhandled slots than one command may settle in its transaction."""


class ClaimLost(SlotflowError):
    """A claim transaction could not advance every row it had locked; it is rolled back."""


@dataclass
class ClaimPass:
    """What one claim transaction did."""

    db_now: datetime
    claimed: int = 0
    fired: int = 0
    skipped: int = 0
    #: (row key, next due instant) of advanced rows, for the timing wheel.
    advanced: list[tuple[str, datetime]] = field(default_factory=list)
    #: The batch was full or a row kept a backlog: claim again at once.
    more: bool = False


class SlotFirer:
    """Fires the due slots of one ticker schema: claims due schedule and timer rows, stages their
    JobDue (or SlotSkipped) and advances their grids in one transaction per pass; settles a
    command's missed slots the same way; resumes paused schedules whose pause ended; purges the
    inbox and finished timers. Named for firing, not claiming: the claimer is another service."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        queries: Queries,
        events: EventFactory,
        metrics: TickerMetrics,
        batch_size: int,
        max_slots: int,
        hold_seconds: float = 0.0,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._q = queries
        self._events = events
        self._metrics = metrics
        self._batch_size = batch_size
        self._max_slots = max_slots
        self._hold_seconds = hold_seconds
        self._fired_scheduled = metrics.slots_fired.labels("scheduled")

    async def claim_schedules(self) -> ClaimPass:
        """Claim one batch of due schedules and fire or skip their due slots."""
        started = time.perf_counter()
        async with self._pool.acquire() as conn, conn.transaction():
            records = await conn.fetch(self._q.claim_due, self._batch_size)
            # now() is the transaction's start: the same instant in every statement of it.
            now: datetime = records[0]["db_now"] if records else await conn.fetchval(self._q.now)
            result = ClaimPass(db_now=now, claimed=len(records), more=len(records) >= self._batch_size)
            if not records:
                return result
            staged: list[Outgoing] = []
            late: Counter[datetime] = Counter()
            tids: list[str] = []
            positions: list[Position] = []
            for record in records:
                row = ScheduleRow.from_record(record)
                try:
                    plan = plan_due(row.state(), now=now, max_slots=self._max_slots)
                except (SlotflowError, ValueError, ArithmeticError) as err:
                    # One broken schedule must not stop the others: leave it due and say so loudly.
                    log.error("cannot plan schedule %s: %s", row.schedule_id, err)
                    continue
                staged.extend(self.stage(row, plan, now=now, late=late))
                tids.append(record["row_tid"])
                positions.append(plan.position)
                result.fired += len(plan.fire)
                result.skipped += len(plan.skip)
                result.more = result.more or plan.more
                if plan.position.next_fire_at is not None:
                    result.advanced.append((schedule_key(row.schedule_id), plan.position.next_fire_at))
            await stage_all(conn, schema=self._schema, items=staged)
            self._fired_scheduled.inc(result.fired)
            self._observe_lateness(late, now)
            status = await conn.execute(
                self._q.advance,
                tids,
                [to_micros(p.next_slot) for p in positions],
                [to_micros(p.next_fire_at) for p in positions],
                [to_micros(p.covered_until) for p in positions],
            )
            if _count(status) != len(tids):
                # A claimed row's tuple moved under its lock: impossible unless something broke the
                # locking; roll everything back rather than fire slots whose grid did not advance.
                raise ClaimLost(f"advanced {_count(status)} of {len(tids)} claimed schedules")
            if self._hold_seconds:
                await asyncio.sleep(self._hold_seconds)
        self._metrics.claim_batch.observe(len(records))
        self._metrics.claim_seconds.observe(time.perf_counter() - started)
        return result

    def _observe_lateness(self, late: "Counter[datetime]", now: datetime) -> None:
        # Slots claimed together mostly share their fire time: one observation per distinct one.
        observe = self._metrics.lateness.observe
        for fire_at, count in late.items():
            observe(max(0.0, (now - fire_at).total_seconds()), count)

    def stage(
        self, row: ScheduleRow, plan: ClaimPlan, *, now: datetime, late: "Counter[datetime] | None" = None
    ) -> list[Outgoing]:
        """The JobDue and SlotSkipped envelopes for a plan; counts them in the metrics.

        With ``late``, the fire times are tallied there for the caller to observe once per claim.
        """
        staged: list[Outgoing] = [
            self._events.job_due(
                row.schedule_id,
                row.definition,
                firing.at,
                kind="scheduled",
                fire_at=firing.fire_at,
                occurred_at=now,
            )
            for firing in plan.fire
        ]
        if plan.skip:
            staged.extend(self._events.slot_skipped(row.schedule_id, s, occurred_at=now) for s in plan.skip)
        if plan.fire:
            tally: Counter[datetime] = Counter() if late is None else late
            for firing in plan.fire:
                tally[firing.fire_at] += 1
            if late is None:
                self._observe_lateness(tally, now)
        for skipped in plan.skip:
            self._metrics.slots_skipped.labels(skipped.reason).inc()
        return staged

    async def settle(
        self, conn: Conn, row: ScheduleRow, *, now: datetime, max_chunks: int
    ) -> tuple[list[Outgoing], Position]:
        """Handle a locked row's slots up to ``now`` before its definition is replaced or deleted.

        Runs inside the caller's transaction. An unpaused schedule meets its misfire policy as a
        claim would; a paused one records every passed slot as skipped (`paused`).

        Raises:
            BacklogTooLong: more than ``max_chunks`` claims' worth of slots are unhandled.
        """
        state = row.state()
        staged: list[Outgoing] = []
        for _ in range(max_chunks):
            plan = plan_due(state, now=now, max_slots=self._max_slots, force_skip=row.paused)
            staged.extend(self.stage(row, plan, now=now))
            self._fired_scheduled.inc(len(plan.fire))
            state = state._replace(position=plan.position)
            if not plan.more:
                return staged, plan.position
        raise BacklogTooLong(
            f"schedule {row.schedule_id} has more than {max_chunks * self._max_slots} unhandled slots "
            f"since {slot_label(row.covered_until)}; resume it and let the claims settle them first"
        )

    async def claim_timers(self) -> ClaimPass:
        """Fire one batch of due durable timers."""
        async with self._pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval(self._q.now)
            records = await conn.fetch(self._q.claim_timers, self._batch_size)
            result = ClaimPass(db_now=now, claimed=len(records), more=len(records) >= self._batch_size)
            if not records:
                return result
            staged: list[Outgoing] = []
            for record in records:
                action = parse_action(record["action"])
                fire_at: datetime = record["fire_at"]
                # The trace of the StartTimer that set it (tracing on and the command carried one).
                stored: str | None = record["trace_parent"]
                parent = tracing.extract({tracing.TRACEPARENT: stored.encode("latin-1")}) if stored else None
                if isinstance(action, FireJobDue):
                    job = (
                        action.job
                        if action.job.fire_at is not None
                        else action.job.model_copy(update={"fire_at": fire_at})
                    )
                    staged.append(self._events.job_due_message(job, occurred_at=now, parent=parent))
                    self._metrics.slots_fired.labels(job.kind).inc()
                else:
                    fired = self._events.timer_fired(
                        record["timer_id"],
                        owner=action.owner,
                        sequence=action.sequence,
                        fire_at=fire_at,
                        fired_at=now,
                    )
                    if stored and tracing.enabled():
                        fired = traced(fired, {tracing.TRACEPARENT: stored.encode("latin-1")})
                    staged.append(fired)
                self._metrics.timers_fired.labels(action.action).inc()
                self._metrics.lateness.observe(max(0.0, (now - fire_at).total_seconds()))
            await stage_all(conn, schema=self._schema, items=staged)
            await conn.execute(self._q.mark_timers_fired, [r["timer_id"] for r in records])
            result.fired = len(records)
        return result

    async def auto_resume(self) -> int:
        """Resume paused schedules whose resume time passed; returns how many."""
        async with self._pool.acquire() as conn, conn.transaction():
            records = await conn.fetch(self._q.auto_resume, self._batch_size)
            staged = [
                self._events.schedule_event(
                    ScheduleResumed(schedule_id=r["schedule_id"], next_fire_at=r["next_fire_at"]),
                    id=f"{r['schedule_id']}/resumed@{slot_label(r['resume_at'])}",
                    key=r["schedule_id"],
                    occurred_at=r["db_now"],
                )
                for r in records
            ]
            await stage_all(conn, schema=self._schema, items=staged)
        return len(records)

    async def purge(self, *, inbox_seconds: float, timer_seconds: float) -> tuple[int, int]:
        """Forget command ids and finished timers older than their retention; returns the counts."""
        inbox = await self._pool.execute(self._q.purge_inbox, inbox_seconds)
        timer_inbox = await self._pool.execute(self._q.purge_timer_inbox, inbox_seconds)
        timers = await self._pool.execute(self._q.purge_timers, timer_seconds)
        return _count(inbox) + _count(timer_inbox), _count(timers)


SCHEDULE_PREFIX = "s:"
TIMER_PREFIX = "t:"


def schedule_key(schedule_id: str) -> str:
    """The timing wheel key of a schedule (timers and schedules share one wheel)."""
    return SCHEDULE_PREFIX + schedule_id


def timer_key(timer_id: str) -> str:
    return TIMER_PREFIX + timer_id


def _count(status: str) -> int:
    return int(status.split()[-1])
