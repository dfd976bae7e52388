"""The one interruptible pause of every loop (re-exported by `slotflow.service`); asyncio only."""

import asyncio
import contextlib


async def sleep_or_stop(stop: asyncio.Event, seconds: float, *, wake: asyncio.Event | None = None) -> bool:
    """Wait `seconds`, or less if `stop` (or `wake`) is set first; returns whether `stop` is set.

    The caller clears `wake` when it has acted on it.
    """
    if stop.is_set() or (wake is not None and wake.is_set()):
        return stop.is_set()
    if wake is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        return stop.is_set()
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return stop.is_set()
