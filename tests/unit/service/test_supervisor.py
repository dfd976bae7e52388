"""slotflow.service: named loops under one supervisor, and sleep_or_stop."""

import asyncio
import time

import pytest

from slotflow.errors import SlotflowError
from slotflow.service import Loop, Supervisor, SupervisorError, periodic, sleep_or_stop


class Boom(SlotflowError):
    """a loop failed"""


async def test_stop_drains_every_loop_and_each_finishes_what_it_holds() -> None:
    finished: list[str] = []

    def loop(name: str) -> Loop:
        async def run(stop: asyncio.Event) -> None:
            await stop.wait()
            await asyncio.sleep(0.01)  # the work in hand
            finished.append(name)

        return run

    supervisor = Supervisor("svc")
    supervisor.add("a", loop("a"))
    supervisor.add("b", loop("b"))
    stop = asyncio.Event()
    running = asyncio.create_task(supervisor.run(stop))
    await asyncio.wait_for(supervisor.running.wait(), 1)
    stop.set()
    await asyncio.wait_for(running, 2)
    assert sorted(finished) == ["a", "b"]
    assert supervisor.crashed is None


async def test_stages_stop_in_order_so_a_later_stage_outlives_an_earlier_one() -> None:
    order: list[str] = []

    async def intake(stop: asyncio.Event) -> None:
        await stop.wait()
        order.append("intake stopped")

    async def relay(stop: asyncio.Event) -> None:
        await stop.wait()
        order.append("relay stopped")

    supervisor = Supervisor("svc")
    supervisor.add("relay", relay, stage=1)
    supervisor.add("intake", intake, stage=0)
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(supervisor.run(stop), 2)
    assert order == ["intake stopped", "relay stopped"]


async def test_a_crashed_loop_is_fatal_its_error_raised_and_the_others_cancelled() -> None:
    cancelled = asyncio.Event()

    async def crashes(stop: asyncio.Event) -> None:
        await asyncio.sleep(0.01)
        raise Boom("kaput")

    async def waits(stop: asyncio.Event) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    supervisor = Supervisor("svc")
    supervisor.add("crashes", crashes)
    supervisor.add("waits", waits)
    with pytest.raises(Boom, match="kaput"):
        await asyncio.wait_for(supervisor.run(asyncio.Event()), 2)
    assert supervisor.crashed == "crashes"
    assert supervisor.failed.is_set()
    assert cancelled.is_set()


async def test_cancel_on_stop_loops_are_cancelled_not_awaited() -> None:
    async def hangs(stop: asyncio.Event) -> None:
        await asyncio.sleep(60)  # a webhook that does not answer

    supervisor = Supervisor("svc")
    supervisor.add("hangs", hangs, cancel_on_stop=True)
    stop = asyncio.Event()
    stop.set()
    started = time.monotonic()
    await asyncio.wait_for(supervisor.run(stop), 2)
    assert time.monotonic() - started < 1


async def test_a_custom_drain_replaces_the_order_and_every_loop_returning_ends_the_run() -> None:
    steps: list[str] = []

    async def once(stop: asyncio.Event) -> None:
        steps.append("ran")

    supervisor = Supervisor("svc")
    supervisor.add("once", once)

    async def drain() -> None:
        steps.append("drained")
        await supervisor.stop_loops("once")

    await asyncio.wait_for(supervisor.run(asyncio.Event(), drain=drain), 2)
    assert steps == ["ran", "drained"]


async def test_cancelling_the_run_cancels_every_loop_without_a_drain() -> None:
    drained = False

    async def waits(stop: asyncio.Event) -> None:
        await asyncio.sleep(60)

    async def drain() -> None:
        nonlocal drained
        drained = True

    supervisor = Supervisor("svc")
    supervisor.add("waits", waits)
    running = asyncio.create_task(supervisor.run(asyncio.Event(), drain=drain))
    await asyncio.wait_for(supervisor.running.wait(), 1)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not drained


def test_loops_have_unique_names_and_are_added_before_the_start() -> None:
    supervisor = Supervisor("svc")

    async def loop(stop: asyncio.Event) -> None:
        return None

    supervisor.add("a", loop)
    with pytest.raises(SupervisorError, match="two loops named a"):
        supervisor.add("a", loop)
    assert supervisor.names == ["a"]


async def test_sleep_or_stop_returns_early_on_stop_or_wake() -> None:
    stop, wake = asyncio.Event(), asyncio.Event()
    started = time.monotonic()
    assert await sleep_or_stop(stop, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, wake.set)
    assert await sleep_or_stop(stop, 30, wake=wake) is False
    asyncio.get_running_loop().call_later(0.01, stop.set)
    assert await sleep_or_stop(stop, 30) is True
    assert await sleep_or_stop(stop, 30, wake=wake) is True
    assert time.monotonic() - started < 5


async def test_periodic_outlives_an_outage_and_stops_on_stop() -> None:
    calls = 0
    stop = asyncio.Event()

    async def job() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database away")
        if calls == 3:
            stop.set()

    await asyncio.wait_for(periodic(0.001, job, outages=(ConnectionError,), what="job")(stop), 2)
    assert calls == 3
