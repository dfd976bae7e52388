"""Event-loop lag: measured on the loop, and a blocked loop named from outside it.

A task on the loop stamps the time every `interval` and records how late each wake-up was. A
blocked loop cannot report itself, so a daemon thread looks at the stamp: when it is older than
`threshold`, the thread reads the loop thread's current stack (`sys._current_frames`), finds the
registered handler on it, and logs that handler with the line it is blocked at, once per stall.

What a blocked loop costs: nothing on this claimer runs meanwhile, heartbeats included, so the
leases of all its runs may lapse and be taken over; the fence makes that safe, not this watchdog.
A plain `def` handler runs in a thread and cannot block the loop in the first place.
"""

import asyncio
import inspect
import logging
import sys
import threading
import time
from types import CodeType, FrameType

from slotflow.runs import HandlerRegistry
from slotflow_claimer.metrics import ClaimerMetrics

log = logging.getLogger(__name__)

UNKNOWN = "(none)"


class LoopWatchdog:
    def __init__(
        self, registry: HandlerRegistry, metrics: ClaimerMetrics, *, threshold: float, interval: float
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._threshold = threshold
        self._interval = interval
        self._stamp = time.monotonic()
        self._reported_stamp: float | None = None
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
                await asyncio.sleep(self._interval)  # short: stopping waits at most this long
                self._metrics.loop_lag.observe(max(time.monotonic() - before - self._interval, 0.0))
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
            self._metrics.loop_blocked.labels(name).inc()
            log.warning(
                "event loop blocked for %.1f s by handler %s at %s: nothing on this claimer runs "
                "meanwhile, heartbeats included (a blocking handler should be a plain def)",
                blocked,
                name,
                where,
            )

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
