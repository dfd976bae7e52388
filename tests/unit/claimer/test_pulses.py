"""One attempt's activity heartbeats (slotflow_claimer.pulses): throttled writes of the newest
details, what is left for the outcome, a refused write, and the local deadline each heartbeat moves.
The write is a recording function here; the statement it runs is proven on PostgreSQL
(tests/integration/claimer/test_heartbeats.py)."""

import asyncio
from datetime import timedelta

import pytest

from slotflow.runs.heartbeats import HeartbeatTimeout
from slotflow_claimer.pulses import Pulse


class Writes:
    """Records each write; answers with `accept` (False: the fence refused it)."""

    def __init__(self) -> None:
        self.sent: list[str | None] = []
        self.accept = True
        self.refusals = 0

    async def __call__(self, details: str | None) -> bool:
        self.sent.append(details)
        await asyncio.sleep(0)
        return self.accept

    def refused(self) -> None:
        self.refusals += 1


def pulse(writes: Writes, timeout: timedelta | None) -> Pulse:
    return Pulse(run_id="r", timeout=timeout, write=writes, refused=writes.refused)


async def test_the_first_heartbeat_is_written_at_once_and_later_ones_wait_for_the_throttle() -> None:
    writes = Writes()
    beats = pulse(writes, timedelta(milliseconds=250))  # throttle 0.2 s
    beats.beat('{"n":1}')
    await asyncio.sleep(0.02)
    assert writes.sent == ['{"n":1}']
    assert beats.unsaved() is None
    beats.beat('{"n":2}')
    beats.beat('{"n":3}')
    await asyncio.sleep(0.05)
    assert writes.sent == ['{"n":1}']  # inside the throttle: nothing yet
    assert beats.unsaved() == '{"n":3}'  # what an outcome now would carry
    await asyncio.sleep(0.3)
    assert writes.sent == ['{"n":1}', '{"n":3}']  # one write, the newest details
    assert beats.unsaved() is None


async def test_a_heartbeat_without_details_keeps_the_recorded_ones() -> None:
    writes = Writes()
    beats = pulse(writes, timedelta(milliseconds=100))
    beats.beat(None)
    await asyncio.sleep(0.02)
    assert writes.sent == [None]
    assert beats.unsaved() is None


async def test_closed_the_pulse_starts_no_write_and_hands_its_details_to_the_outcome() -> None:
    writes = Writes()
    beats = pulse(writes, timedelta(milliseconds=250))
    beats.beat('{"n":1}')
    await asyncio.sleep(0.02)
    beats.beat('{"n":2}')
    beats.close()
    await asyncio.sleep(0.3)
    assert writes.sent == ['{"n":1}']
    assert beats.unsaved() == '{"n":2}'


async def test_a_refused_write_reports_the_run_lost_once() -> None:
    writes = Writes()
    writes.accept = False
    beats = pulse(writes, timedelta(milliseconds=100))
    beats.beat('{"n":1}')
    await asyncio.sleep(0.02)
    beats.beat('{"n":2}')
    await asyncio.sleep(0.2)
    assert writes.refusals == 1
    assert writes.sent == ['{"n":1}']  # nothing more once refused


async def test_each_heartbeat_moves_the_local_deadline_and_silence_times_out() -> None:
    writes = Writes()
    beats = pulse(writes, timedelta(milliseconds=200))
    silence = asyncio.timeout(0.2)
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):  # noqa: PT012 - the silence is what raises, after the beats
        async with silence:
            beats.watch(silence)
            for _ in range(4):  # 0.4 s of heartbeats every 0.1 s: never silent for 0.2 s
                await asyncio.sleep(0.1)
                beats.beat(None)
            await asyncio.Event().wait()  # then silent
    assert silence.expired()
    assert asyncio.get_running_loop().time() - started >= 0.55
    beats.close()
    failure = beats.timed_out()
    assert isinstance(failure, HeartbeatTimeout)
    assert "heartbeat_timeout 0.2 s" in str(failure)
