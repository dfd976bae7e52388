"""The one interruptible pause of every loop (re-exported by `slotflow.service`); asyncio only."""

import asyncio
import contextlib


def raise_if_cancelled() -> None:
    """Raise the CancelledError of a cancellation that some library turned into another error.

    asyncpg does: a task cancelled inside `conn.transaction()` on a connection the server has
    closed (a restart, a reset) gets `InterfaceError: cannot call Transaction.__aexit__(): the
    underlying connection is closed` instead. A loop that waits out storage errors would take that
    for an outage and carry on, and the supervisor that cancelled it after a crash would wait for
    it forever (a claimer that never exited and kept its partitions). The task still counts the
    request (`Task.cancelling`), so every pause of a retry asks here first.

    Raises:
        asyncio.CancelledError: this task was asked to stop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def sleep_or_stop(stop: asyncio.Event, seconds: float, *, wake: asyncio.Event | None = None) -> bool:
    """Wait `seconds`, or less if `stop` (or `wake`) is set first; returns whether `stop` is set.

    The caller clears `wake` when it has acted on it.

    Raises:
        asyncio.CancelledError: this task was cancelled, even if the error that brought it here
            replaced the cancellation (see `raise_if_cancelled`).
    """
    raise_if_cancelled()
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
