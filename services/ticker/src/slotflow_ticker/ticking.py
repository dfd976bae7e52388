"""The ticker's heartbeat: hold near-due rows in a timing wheel, sleep until the earliest one, claim.

The table is asked only for the rows due within the next horizon (every horizon/2, which doubles as
the fallback poll that catches rows another replica created or moved). Their fire times go into an
in-memory hierarchical timing wheel, so this replica wakes within a tick of each one instead of
rescanning the table. Waking only triggers the claim query: which rows are due, and who fires
them, is decided by the database clock and SKIP LOCKED, never by the wheel or the host clock.

Two loops share the wheel. The claim loop only advances the wheel and claims due schedules, so a
due row never waits behind anything else; the side loop reloads the horizon and claims timers and
automatic resumes (at each reload, and when the claim loop sees a timer's deadline expire). A row a
claim or a command moves while a reload is in flight is held until that reload has set the new
horizon, then placed against it, so the overlap cannot lose a row between two incremental loads.

Host time is used only to decide how long to sleep. The wheel runs in database time, estimated as
the last database `now()` seen plus the monotonic time elapsed since; it is re-anchored at every
claim and reload. A skewed host clock therefore changes nothing (monotonic time has no epoch), and
waking early is harmless: the claim finds nothing due and the deadline goes back into the wheel.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Protocol

from slotflow.core.timing_wheel import TimingWheel
from slotflow.errors import TransientStorageError
from slotflow.pg.pool import CONNECTION_ERRORS, Pool
from slotflow.service import sleep_or_stop
from slotflow_ticker.claims import TIMER_PREFIX, ClaimPass, SlotFirer, schedule_key, timer_key
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import Queries

log = logging.getLogger(__name__)

#: Most rows one horizon load puts into the wheel; a denser horizon is loaded in parts.
HORIZON_LIMIT = 200_000
#: A burst of commands asks for a reload each; one reload per this many seconds answers them all.
MIN_RELOAD_GAP = 0.05
#: Loads are incremental (rows that entered the horizon since the last one); every this many
#: loads the whole horizon is read again, which re-finds a row whose wheel died with its replica.
FULL_RELOAD_EVERY = 10
#: Filling the wheel yields to the event loop this often, so a large load never holds up a claim.
FILL_CHUNK = 500
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)


class Wakeable(Protocol):
    """The outbox relay (or relays), woken after each claim that staged rows."""

    def wake(self) -> None: ...


class DatabaseClock:
    """The database clock, estimated between queries from the monotonic clock."""

    def __init__(self) -> None:
        self._db: datetime | None = None
        self._mono = 0.0

    def anchor(self, db_now: datetime) -> None:
        # Taken after the reply arrived, so the estimate lags the database by the round trip:
        # deadlines are met slightly late, never early.
        self._db = db_now
        self._mono = time.monotonic()

    def now(self) -> datetime:
        if self._db is None:
            raise TransientStorageError("the database clock has not been read yet")
        return self._db + timedelta(seconds=time.monotonic() - self._mono)

    def seconds_until(self, instant: datetime) -> float:
        return (instant - self.now()).total_seconds()


class Ticking:
    """Claims due schedules and timers when the wheel says so; one per ticker replica."""

    def __init__(
        self,
        pool: Pool,
        *,
        firer: SlotFirer,
        queries: Queries,
        settings: TickerSettings,
        metrics: TickerMetrics,
        relay: Wakeable | None = None,
    ) -> None:
        self._pool = pool
        self._firer = firer
        self._q = queries
        self._settings = settings
        self._metrics = metrics
        self._relay = relay
        self._clock = DatabaseClock()
        self._wheel: TimingWheel[str] | None = None
        self._wake = asyncio.Event()
        self._reload_requested = True
        self._next_reload = 0.0
        self._last_reload = -MIN_RELOAD_GAP
        self._loaded_until: datetime | None = None
        self._loads = 0
        self._side_wake = asyncio.Event()
        self._reloading = False
        self._held: list[tuple[str, datetime]] = []
        #: The claim loop claims schedules once after each reload (the fallback poll).
        self._poll_due = False
        #: Timers to claim: a timer's deadline expired, or a reload came (their fallback poll,
        #: which also runs the automatic resumes).
        self._timers_due = False
        self._timer_poll_due = False
        self.passes = 0

    def offer(self, due: list[tuple[str, datetime]]) -> None:
        """Rows a command just made due: into the wheel if within the loaded horizon.

        Later ones arrive with the reload that covers them, so a burst of commands costs no
        extra queries.
        """
        placed = [self._place(key, deadline) for key, deadline in due]  # every one, no short cut
        if any(placed):
            self._wake.set()

    def _place(self, key: str, deadline: datetime) -> bool:
        """Into the wheel if within the loaded horizon; True if it went in."""
        if self._wheel is None or self._loaded_until is None:
            return False
        if deadline <= self._loaded_until:
            self._wheel.add(key, deadline)
            return True
        if self._reloading:
            # The reload in flight may have read this row before it moved, and the next one only
            # asks for rows past the horizon this one sets: placed when it is set.
            self._held.append((key, deadline))
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set; database outages are waited out."""
        side = asyncio.create_task(self._run_side(stop), name="ticking-side")
        try:
            while not stop.is_set():
                if side.done():
                    side.result()  # a bug in the side loop stops the replica, not just reloads
                try:
                    await self._cycle(stop)
                except _STORAGE_ERRORS as err:
                    log.warning("ticker %s: storage unavailable: %s", self._settings.ticker_id, err)
                    self._request_reload()
                    await sleep_or_stop(stop, 1.0, wake=self._wake)
            # Stopping: the side loop sees `stop` too and ends its transaction first.
            await side
        finally:
            side.cancel()  # only when this loop was cancelled or failed
            await asyncio.gather(side, return_exceptions=True)

    async def _cycle(self, stop: asyncio.Event) -> None:
        wheel = self._wheel
        if wheel is None:
            await sleep_or_stop(stop, 1.0, wake=self._wake)  # the side loop's first reload wakes us
            self._wake.clear()
            return
        expired = wheel.advance(self._clock.now())
        if expired or self._poll_due:
            self._poll_due = False
            if any(key.startswith(TIMER_PREFIX) for key, _ in expired):
                self._timers_due = True
                self._side_wake.set()
            db_now = await self._drain(self._firer.claim_schedules, self._settings.claim_concurrency)
            # Woke before the database clock reached them (the estimate lags, rarely leads):
            # back into the wheel, so they are met precisely rather than at the next reload.
            for key, deadline in expired:
                if deadline > db_now:
                    wheel.add(key, deadline)
        self._metrics.wheel_pending.set(len(wheel))
        await sleep_or_stop(stop, self._sleep_seconds(wheel), wake=self._wake)
        self._wake.clear()

    async def _run_side(self, stop: asyncio.Event) -> None:
        """Horizon reloads, timer claims and automatic resumes, beside the claim loop."""
        while not stop.is_set():
            try:
                if self._reload_due():
                    await self._reload()
                    self._timer_poll_due = True
                    self._poll_due = True  # the claim loop's fallback poll of the schedules
                    self._wake.set()
                if self._timers_due or self._timer_poll_due:
                    resumes = self._timer_poll_due
                    self._timers_due = self._timer_poll_due = False
                    await self._drain(self._firer.claim_timers)
                    if resumes and await self._firer.auto_resume():
                        self._request_reload()
            except _STORAGE_ERRORS as err:
                log.warning("ticker %s: storage unavailable: %s", self._settings.ticker_id, err)
                self._reload_requested = True
                self._timer_poll_due = True
                await sleep_or_stop(stop, 1.0)  # not woken early: the outage needs time
                continue
            await sleep_or_stop(stop, self._until_reload(), wake=self._side_wake)
            self._side_wake.clear()

    def _request_reload(self) -> None:
        self._reload_requested = True
        self._side_wake.set()

    def _reload_due(self) -> bool:
        mono = time.monotonic()
        if self._reload_requested and mono - self._last_reload >= MIN_RELOAD_GAP:
            return True
        return mono >= self._next_reload

    def _until_reload(self) -> float:
        next_reload = self._next_reload
        if self._reload_requested:
            next_reload = min(next_reload, self._last_reload + MIN_RELOAD_GAP)
        return max(0.0, next_reload - time.monotonic())

    def _sleep_seconds(self, wheel: TimingWheel[str]) -> float:
        # Reloads wake this loop when they add rows, so only the wheel bounds the sleep; the cap
        # re-reads the clock estimate now and then.
        deadline = wheel.next_deadline()
        if deadline is None:
            return self._settings.reload_interval
        return max(0.0, min(self._settings.reload_interval, self._clock.seconds_until(deadline)))

    async def _reload(self) -> None:
        """Ask the table for the next horizon (plus anything already due) and fill the wheel."""
        full = self._reload_requested or self._loaded_until is None or self._loads % FULL_RELOAD_EVERY == 0
        self._reload_requested = False
        self._loads += 1
        self._reloading = True
        try:
            await self._load(full)
        finally:
            self._reloading = False
            held, self._held = self._held, []
        if self._loaded_until is not None:
            for key, deadline in held:
                self._place(key, deadline)

    async def _load(self, full: bool) -> None:
        horizon = self._settings.horizon_seconds
        async with self._pool.acquire() as conn:
            db_now: datetime = await conn.fetchval(self._q.now)
            # Anchored before the horizon queries: the claim loop re-anchors meanwhile, and an
            # anchor taken after them would set the estimate back by their duration.
            self._clock.anchor(db_now)
            if full or self._loaded_until is None:
                schedules = await conn.fetch(self._q.horizon_schedules, horizon, HORIZON_LIMIT)
                timers = await conn.fetch(self._q.horizon_timers, horizon, HORIZON_LIMIT)
            else:
                since = self._loaded_until
                schedules = await conn.fetch(self._q.horizon_schedules_after, horizon, HORIZON_LIMIT, since)
                timers = await conn.fetch(self._q.horizon_timers_after, horizon, HORIZON_LIMIT, since)
        self._last_reload = time.monotonic()
        self._next_reload = self._last_reload + self._settings.reload_interval
        if self._wheel is None:
            self._wheel = TimingWheel[str](
                tick=timedelta(milliseconds=self._settings.wheel_tick_ms),
                wheel_size=self._settings.wheel_size,
                start=db_now,
            )
        loaded_until = db_now + timedelta(seconds=horizon)
        for rows in (schedules, timers):
            if len(rows) >= HORIZON_LIMIT:
                loaded_until = min(loaded_until, rows[-1][1])
        self._loaded_until = loaded_until
        wheel = self._wheel
        for count, record in enumerate(schedules, 1):
            wheel.add(schedule_key(record["schedule_id"]), record["next_fire_at"])
            if count % FILL_CHUNK == 0:
                await asyncio.sleep(0)
        for record in timers:
            wheel.add(timer_key(record["timer_id"]), record["fire_at"])

    async def claim_all(self, *, timers: bool = True, resumes: bool = True) -> datetime:
        """Claim until nothing due is left; returns the database time of the last pass."""
        db_now = await self._drain(self._firer.claim_schedules, self._settings.claim_concurrency)
        if timers:
            db_now = max(db_now, await self._drain(self._firer.claim_timers))
        if resumes and await self._firer.auto_resume():
            self._request_reload()
        return db_now

    async def _drain(self, claim: Callable[[], Awaitable[ClaimPass]], concurrency: int = 1) -> datetime:
        result = await self._claim_once(claim)
        if not result.more:
            return result.db_now
        # A backlog: several claim transactions at once, so one plans in Python while another
        # waits on the database. SKIP LOCKED hands each of them different rows.
        ends = await asyncio.gather(*(self._claim_until_done(claim) for _ in range(concurrency)))
        return max(ends)

    async def _claim_until_done(self, claim: Callable[[], Awaitable[ClaimPass]]) -> datetime:
        while True:
            result = await self._claim_once(claim)
            if not result.more:
                return result.db_now

    async def _claim_once(self, claim: Callable[[], Awaitable[ClaimPass]]) -> ClaimPass:
        result = await claim()
        self.passes += 1
        self._clock.anchor(result.db_now)
        if (result.fired or result.skipped) and self._relay is not None:
            self._relay.wake()
        self._add_advanced(result)
        return result

    def _add_advanced(self, result: ClaimPass) -> None:
        for key, deadline in result.advanced:
            # Later deadlines arrive with the reload that covers them.
            self._place(key, deadline)
