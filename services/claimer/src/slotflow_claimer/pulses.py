"""One attempt's activity heartbeats (`ctx.heartbeat`), as the executor running it keeps them.

Not the lease's heartbeat (`Executor.heartbeat_once`, one statement for every run held): these are
the handler's own, and cost nothing for a run that never calls `ctx.heartbeat`. A `Pulse` keeps the
newest details, writes them on the run under the attempt's token at most once per throttle interval
(`slotflow.runs.heartbeats.throttle_seconds`), hands the ones not yet written to the attempt's
outcome, and moves the attempt's local heartbeat deadline on every heartbeat. A write the fence
refuses means the run is someone else's now: the executor cancels the handler. docs/claimer.md,
"Heartbeats".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from slotflow.runs.heartbeats import HeartbeatTimeout, Throttle, silence_message, throttle_seconds
from slotflow_claimer.retrying import STORAGE_RETRYABLE

log = logging.getLogger(__name__)

#: Writes one heartbeat: the details as JSON (None: the recorded ones stay); False when the fence
#: refused it.
HeartbeatWrite = Callable[[str | None], Awaitable[bool]]


class Pulse:
    """The activity heartbeats of one attempt; every method runs on the claimer's loop."""

    def __init__(
        self,
        *,
        run_id: str,
        timeout: timedelta | None,
        write: HeartbeatWrite,
        refused: Callable[[], None],
    ) -> None:
        self._run_id = run_id
        self._timeout = timeout
        self._write = write
        self._refused = refused
        self._throttle = Throttle(throttle_seconds(timeout))
        #: The newest details given (JSON), and whether they are in the database yet.
        self._details: str | None = None
        self._details_saved = True
        #: A heartbeat was given since the last write started.
        self._due = False
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: The attempt's local deadline while its handler runs (None without a heartbeat_timeout).
        self._silence: asyncio.Timeout | None = None
        self._closed = False

    @property
    def timeout(self) -> timedelta | None:
        return self._timeout

    def watch(self, silence: asyncio.Timeout | None) -> None:
        """The handler started under ``silence`` (heartbeat_timeout seconds from now): move it on
        with every heartbeat from here; None once the handler's wait is over."""
        self._silence = silence

    def timed_out(self) -> HeartbeatTimeout:
        """The failure of an attempt that went silent here, on a live claimer."""
        timeout = self._timeout or timedelta(0)
        return HeartbeatTimeout(silence_message(timeout))

    def beat(self, details: str | None) -> None:
        """A heartbeat from the handler (`RunContext.on_heartbeat`): ``details`` as JSON or None."""
        if self._closed:
            return
        if details is not None:
            self._details = details
            self._details_saved = False
        self._due = True
        if self._silence is not None and self._timeout is not None and not self._silence.expired():
            loop = asyncio.get_running_loop()
            self._silence.reschedule(loop.time() + self._timeout.total_seconds())
        self._schedule()

    def unsaved(self) -> str | None:
        """The newest details not known to be in the database (None: nothing to add): they go with
        the attempt's outcome, in its fenced write, so a failure right after a heartbeat loses none."""
        return None if self._details_saved else self._details

    def close(self) -> None:
        """The attempt is over: no further writes start (one under way finishes, fenced)."""
        self._closed = True
        self._silence = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        if self._writer is not None or self._timer is not None:
            return  # the write under way, or the one waiting for the throttle, takes it
        wait = self._throttle.wait(time.monotonic())
        if wait > 0:
            self._timer = asyncio.get_running_loop().call_later(wait, self._start)
            return
        self._start()

    def _start(self) -> None:
        self._timer = None
        if self._closed or not self._due:
            return
        self._due = False
        self._throttle.wrote(time.monotonic())
        details = None if self._details_saved else self._details
        self._writer = asyncio.get_running_loop().create_task(
            self._send(details), name=f"heartbeat {self._run_id}"
        )

    async def _send(self, details: str | None) -> None:
        try:
            recorded = await self._write(details)
        except STORAGE_RETRYABLE as err:
            # Kept unsaved: the next heartbeat, or the outcome, writes them.
            log.warning("run %s: heartbeat not recorded: %r", self._run_id, err)
            self._writer = None
            return
        self._writer = None
        if not recorded:
            if not self._closed:  # refused after the outcome was written: nothing left to stop
                self._closed = True
                self._refused()
            return
        if details is not None and details is self._details:
            self._details_saved = True
        if self._due and not self._closed:
            self._schedule()
