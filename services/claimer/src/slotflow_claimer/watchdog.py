"""Event-loop lag: measured on the loop, and a blocked loop named from outside it.

A task on the loop stamps the time every `interval` and records how late each wake-up was. A
blocked loop cannot report itself, so a daemon thread looks at the stamp: when it is older than
`threshold`, the thread reads the loop thread's current stack (`sys._current_frames`), finds the
registered handler on it, and logs that handler with the line it is blocked at, once per stall.

What a blocked loop costs: nothing on this claimer runs meanwhile, heartbeats included, so the
leases of all its runs may lapse and be taken over; the fence makes that safe, not this watchdog.
A plain `def` handler runs in a thread and cannot block the loop in the first place.

Each stall is also kept (`Stall`) with the CPU the process used meanwhile, so the executor can tell
a claimer that froze from one a handler blocked (`froze_since`): a process stopped (SIGSTOP) or
starved of CPU runs nothing and no handler is named, while a handler blocking the loop is named, and
one holding the interpreter in a thread keeps the process busy. The leases a frozen claimer lost say
nothing about its runs, so their lapses are excused like those lost to an unreachable database.
"""

import asyncio
import inspect
import logging
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import CodeType, FrameType

from slotflow.runs import HandlerRegistry
from slotflow_claimer.metrics import ClaimerMetrics

log = logging.getLogger(__name__)

UNKNOWN = "(none)"
#: A stall is the machine's, not a handler's, when nobody was named and the process used less CPU
#: than this share of it. Stopped, or starved so hard that its loop stood still for seconds, it
#: ran next to nothing; a handler holding the interpreter in a thread (where the watchdog cannot
#: name it) keeps running on whatever CPU the machine gives it, a fair share even on a busy one.
FROZEN_CPU_SHARE = 0.1
#: How soon after a stall's threshold the watchdog's look still names what blocks the loop.
PROMPT_LOOK_SECONDS = 1.0
#: The stalls kept for `froze_since`: a lease is renewed every few seconds, so only recent ones count.
STALLS_KEPT = 32


@dataclass(frozen=True, slots=True)
class Stall:
    """A wake-up of the loop at least the watchdog's threshold late (monotonic seconds)."""

    started: float
    ended: float
    #: Process CPU seconds (every thread) used between `started` and `ended`.
    cpu: float
    #: The handler named as blocking the loop during it, or UNKNOWN.
    blamed: str

    @property
    def frozen(self) -> bool:
        """The process stood still (stopped, starved), rather than a handler holding it."""
        return self.blamed == UNKNOWN and self.cpu < FROZEN_CPU_SHARE * (self.ended - self.started)


class LoopWatchdog:
    def __init__(
        self, registry: HandlerRegistry, metrics: ClaimerMetrics, *, threshold: float, interval: float
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._threshold = threshold
        self._interval = interval
        self._stamp = time.monotonic()
        self._cpu_stamp = time.process_time()
        self._reported_stamp: float | None = None
        #: The thread's first look at the stall that began at a stamp: that stall measured then.
        self._looked: Stall | None = None
        self._stalls: deque[Stall] = deque(maxlen=STALLS_KEPT)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread_id: int | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """The loop side: stamp, sleep, record how late the wake-up came."""
        self._loop_thread_id = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, name="slotflow-loop-watchdog", daemon=True)
        self._thread.start()
        try:
            while not stop.is_set():
                self._stamp = before = time.monotonic()
                self._cpu_stamp = cpu_before = time.process_time()
                await asyncio.sleep(self._interval)  # short: stopping waits at most this long
                now = time.monotonic()
                lag = max(now - before - self._interval, 0.0)
                self._metrics.loop_lag.observe(lag)
                if lag >= self._threshold:
                    self._stalls.append(self._measured(before, cpu_before, now))
        finally:
            self._halt.set()

    def _watch(self) -> None:
        while not self._halt.wait(self._interval):
            stamp = self._stamp
            blocked = time.monotonic() - stamp
            if blocked < self._threshold or self._reported_stamp == stamp:
                continue
            self._reported_stamp = stamp  # once per stall
            name, where = self.blame()
            # Named while it blocks, the handler is to blame. A look this late means the watchdog
            # stood still too (the process was stopped or starved): whatever runs on the loop now
            # only just woke, so it names nobody for `froze_since`.
            prompt = blocked < self._threshold + PROMPT_LOOK_SECONDS
            # The CPU is read here too: a process thawed after a stop or a starved minute catches up
            # at once on everything that waited, which the loop's own wake-up would count as the
            # stall's. This look comes first, unless a handler holds the interpreter meanwhile.
            self._looked = Stall(
                stamp, time.monotonic(), time.process_time() - self._cpu_stamp, name if prompt else UNKNOWN
            )
            self._metrics.loop_blocked.labels(name).inc()
            log.warning(
                "event loop blocked for %.1f s by handler %s at %s: nothing on this claimer runs "
                "meanwhile, heartbeats included (a blocking handler should be a plain def)",
                blocked,
                name,
                where,
            )

    def froze_since(self, since: float) -> bool:
        """Whether this process froze (`Stall.frozen`) at some time after ``since`` (monotonic).

        Asked from the loop by the executor when it finds a lease lost, which can be before this
        watchdog's own task wakes from the stall that just ended: a stamp older than the threshold
        is that stall, measured here."""
        now = time.monotonic()
        stalls = list(self._stalls)
        if now - self._stamp - self._interval >= self._threshold:
            stalls.append(self._measured(self._stamp, self._cpu_stamp, now))
        return any(stall.ended > since and stall.frozen for stall in stalls)

    def _measured(self, stamp: float, cpu_stamp: float, now: float) -> Stall:
        """The stall that began at ``stamp``: as the thread's look saw it, or as it is now."""
        looked = self._looked
        if looked is not None and looked.started == stamp:
            return looked
        return Stall(stamp, now, time.process_time() - cpu_stamp, UNKNOWN)

    def blame(self) -> tuple[str, str]:
        """The registered handler on the loop thread's stack now, and the innermost location."""
        # The one way to see the stack of a thread that is blocked.
        frames = sys._current_frames()
        frame = frames.get(self._loop_thread_id) if self._loop_thread_id is not None else None
        if frame is None:
            return UNKNOWN, "?"
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        codes = self._handler_codes()
        walk: FrameType | None = frame
        while walk is not None:
            name = codes.get(walk.f_code)
            if name is not None:
                return name, where
            walk = walk.f_back
        return UNKNOWN, where

    def _handler_codes(self) -> dict[CodeType, str]:
        codes: dict[CodeType, str] = {}
        for handler in self._registry.handlers():
            code = getattr(inspect.unwrap(handler.fn), "__code__", None)
            if isinstance(code, CodeType):
                codes[code] = handler.name
        return codes
