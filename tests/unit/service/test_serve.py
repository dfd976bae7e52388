"""`slotflow.service.serve`, every service's entry: signals stop it (0), a crash or an unasked end
exits 1, on either event loop."""

import asyncio
import os
import signal
from typing import Literal

import pytest

from slotflow.service import EXIT_CRASHED, EXIT_STOPPED, serve

EVENT_LOOPS: tuple[Literal["uvloop", "asyncio"], ...] = ("asyncio", "uvloop")


class UntilStopped:
    """Sends itself ``signum`` once running, then runs until the stop and drains."""

    def __init__(self, signum: signal.Signals) -> None:
        self.signum = signum
        self.drained = False

    async def run(self, stop: asyncio.Event) -> None:
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), self.signum)
        await stop.wait()
        self.drained = True


class Crashing:
    async def run(self, stop: asyncio.Event) -> None:
        raise RuntimeError("the projector loop crashed")


class EndingUnasked:
    async def run(self, stop: asyncio.Event) -> None:
        return


@pytest.mark.parametrize("event_loop", EVENT_LOOPS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_service_after_its_drain(
    event_loop: Literal["uvloop", "asyncio"], signum: signal.Signals
) -> None:
    service = UntilStopped(signum)
    assert serve("test", lambda: service, event_loop=event_loop) == EXIT_STOPPED
    assert service.drained


@pytest.mark.parametrize("event_loop", EVENT_LOOPS)
def test_a_crash_exits_non_zero_and_says_so(
    event_loop: Literal["uvloop", "asyncio"], caplog: pytest.LogCaptureFixture
) -> None:
    assert serve("test", Crashing, event_loop=event_loop) == EXIT_CRASHED
    assert "test: stopped by an error" in caplog.text
    assert "the projector loop crashed" in caplog.text


def test_a_service_that_ends_unasked_exits_non_zero(caplog: pytest.LogCaptureFixture) -> None:
    assert serve("test", EndingUnasked) == EXIT_CRASHED
    assert "every loop ended without a stop" in caplog.text


def test_a_service_that_cannot_be_built_exits_non_zero() -> None:
    def build() -> Crashing:
        raise RuntimeError("no database")

    assert serve("test", build) == EXIT_CRASHED
