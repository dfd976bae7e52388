"""The loop watchdog tells a process that stood still from a handler that held it.

A frozen claimer's lost leases are excused (its run did nothing); a handler's are not (it would
take down every claimer in turn). The watchdog keeps each stall with the CPU the process used and
the handler it named; `froze_since` answers for the stalls after a lease's last renewal."""

import asyncio
import time

from slotflow.runs import HandlerRegistry, RunContext
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.watchdog import UNKNOWN, LoopWatchdog, Stall

THRESHOLD = 0.1
STALL_S = 0.4


def test_a_stall_is_the_machines_only_when_nobody_was_named_and_the_process_ran_little() -> None:
    assert Stall(started=10.0, ended=15.0, cpu=0.1, blamed=UNKNOWN).frozen  # stopped or starved
    assert not Stall(started=10.0, ended=15.0, cpu=4.8, blamed=UNKNOWN).frozen  # a thread held it
    assert not Stall(started=10.0, ended=15.0, cpu=0.0, blamed="payouts.pay").frozen  # a handler


async def blocking_handler(ctx: RunContext) -> None:
    time.sleep(STALL_S)  # the blocking call the watchdog must name


def _idle_stall() -> None:
    time.sleep(STALL_S)  # the loop stands still, no handler on its stack, no CPU spent


def _busy_stall() -> None:
    until = time.monotonic() + STALL_S
    while time.monotonic() < until:  # the process busy all along, no handler on its stack
        pass


async def _watched(stall: object) -> tuple[bool, bool]:
    """froze_since(before the stall) once the stall ended, asked first before the watchdog's own
    task woke and then after it recorded the stall."""
    registry = HandlerRegistry()
    registry.register("payouts.blocking", blocking_handler)
    watchdog = LoopWatchdog(registry, ClaimerMetrics(), threshold=THRESHOLD, interval=0.02)
    stop = asyncio.Event()
    task = asyncio.create_task(watchdog.run(stop))
    await asyncio.sleep(0.1)
    before = time.monotonic()
    if stall is blocking_handler:
        await blocking_handler(None)  # type: ignore[arg-type]  # only its code object is looked for
    else:
        assert callable(stall)
        stall()
    at_once = watchdog.froze_since(before)
    await asyncio.sleep(0.1)
    recorded = watchdog.froze_since(before)
    stop.set()
    await task
    return at_once, recorded


async def test_a_loop_that_stood_still_with_no_handler_and_no_cpu_froze() -> None:
    assert await _watched(_idle_stall) == (True, True)


async def test_a_handler_named_blocking_the_loop_is_not_a_freeze() -> None:
    assert await _watched(blocking_handler) == (False, False)


async def test_a_busy_process_is_not_a_freeze() -> None:
    assert await _watched(_busy_stall) == (False, False)


async def test_only_stalls_after_the_time_asked_about_count() -> None:
    registry = HandlerRegistry()
    watchdog = LoopWatchdog(registry, ClaimerMetrics(), threshold=THRESHOLD, interval=0.02)
    stop = asyncio.Event()
    task = asyncio.create_task(watchdog.run(stop))
    await asyncio.sleep(0.1)
    _idle_stall()
    await asyncio.sleep(0.1)
    renewed = time.monotonic()
    await asyncio.sleep(0.1)
    assert not watchdog.froze_since(renewed)
    stop.set()
    await task
