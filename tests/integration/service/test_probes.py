"""Every worker's probes tell the truth, on the real broker and database: started in-process, a
service answers /livez and /readyz 200; its event loop blocked (a synchronous sleep scheduled onto
it, as a blocking call in a handler would block it), /livez turns 503 within the threshold, from
the listener's own thread, and 200 again once the loop runs; a stop turns /readyz 503 at once.

Before the probes, the kubelet asked /metrics, which prometheus_client answered from its own
thread in milliseconds whatever the loop did: a hung service was never restarted."""

import asyncio
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from slotflow.principals import SignatureSettings
from slotflow.runs import HandlerRegistry
from slotflow.service import Service
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing.processes import free_port
from slotflow_claimer.app import ClaimerService
from slotflow_dlq.app import DlqService
from slotflow_dlq.config import DlqSettings
from slotflow_dlq.config import Settings as DlqServiceSettings
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.workflow_code import load_workflow_code
from slotflow_ticker.app import TickerService
from slotflow_ticker.config import Settings as TickerServiceSettings
from tests.integration.claimer.support import settings_for as claimer_settings
from tests.integration.orchestrator.support import orchestrator_settings
from tests.integration.ticker.support import ticker_settings

#: The liveness threshold of these tests: long enough for a loaded machine's ordinary pauses.
STALL_SECONDS = 1.0
#: How long the loop is blocked: well past the threshold.
BLOCK_SECONDS = 3.0
#: Slack on a loaded machine between the threshold passing and the probe seeing it.
SLACK_SECONDS = 1.5


def build(name: str, kafka: KafkaSettings, pg_dsn: str, port: int) -> Service:
    """Service ``name`` with its probes on ``port`` and a short liveness threshold."""
    probes: dict[str, Any] = {"metrics_port": port, "liveness_stall_seconds": STALL_SECONDS}
    if name == "ticker":
        return TickerService(
            TickerServiceSettings(
                ticker=ticker_settings(**probes),
                kafka=kafka,
                postgres=PostgresSettings(dsn=pg_dsn),
                signatures=SignatureSettings(),
            )
        )
    if name == "claimer":
        return ClaimerService(claimer_settings(kafka, pg_dsn, **probes), registry=HandlerRegistry())
    if name == "orchestrator":
        return OrchestratorService(
            orchestrator_settings(kafka, pg_dsn, **probes),
            workflow_code=load_workflow_code(["tests.integration.orchestrator.flows"]),
        )
    return DlqService(
        DlqServiceSettings(
            dlq=DlqSettings(**probes),
            kafka=kafka,
            postgres=PostgresSettings(dsn=pg_dsn),
            signatures=SignatureSettings(),
        )
    )


def get(port: int, path: str) -> tuple[int, str]:
    """One probe, as the kubelet asks it (blocking: run from a thread, or on purpose on the loop)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()
    except OSError as err:  # not listening yet
        return 0, repr(err)


@dataclass
class Blocked:
    """What the probes answered while the loop was blocked, seconds after the block began."""

    answers: list[tuple[float, int, str]] = field(default_factory=list)

    def first(self, status: int) -> tuple[float, str] | None:
        return next(((at, text) for at, code, text in self.answers if code == status), None)

    def summary(self) -> list[tuple[float, int, str]]:
        """The answers, each cut short (a /metrics page stood for /livez before the probes)."""
        return [(round(at, 2), code, text[:60]) for at, code, text in self.answers]


def block_and_watch(loop: asyncio.AbstractEventLoop, port: int) -> Blocked:
    """Block ``loop`` for `BLOCK_SECONDS` from this thread and ask /livez meanwhile and after,
    until it answers 200 again (or 20 s pass)."""
    seen = Blocked()
    began = time.monotonic()
    loop.call_soon_threadsafe(time.sleep, BLOCK_SECONDS)
    while time.monotonic() - began < BLOCK_SECONDS + 20:
        status, text = get(port, "/livez")
        at = time.monotonic() - began
        seen.answers.append((at, status, text))
        if status == 200 and at > BLOCK_SECONDS:
            break
        time.sleep(0.1)
    return seen


async def wait_until(port: int, path: str, task: "asyncio.Task[None]", timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    last = (0, "")
    while time.monotonic() < deadline:
        if task.done():
            task.result()  # raises what stopped it
            raise AssertionError("the service returned before it was ready")
        last = await asyncio.to_thread(get, port, path)
        if last[0] == 200:
            return last[1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{path} never answered 200 within {timeout:.0f} s; last: {last}")


@pytest.mark.parametrize("name", ["ticker", "claimer", "orchestrator", "dlq"])
async def test_liveness_sees_a_blocked_loop_and_readiness_a_stop(
    name: str, kafka: KafkaSettings, pg_dsn: str
) -> None:
    port = free_port()
    service = build(name, kafka, pg_dsn, port)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    stopped = False
    try:
        ready = await wait_until(port, "/readyz", task)
        assert (await asyncio.to_thread(get, port, "/livez"))[0] == 200

        seen = await asyncio.to_thread(block_and_watch, asyncio.get_running_loop(), port)
        stalled = seen.first(503)
        assert stalled is not None, f"/livez never answered 503 while the loop was blocked: {seen.summary()}"
        at, reason = stalled
        assert reason.startswith("event loop stalled for "), reason
        # The last stamp before the block may be up to one beat old: 503 comes at most the
        # threshold after the block began, plus the slack of a loaded machine.
        assert at <= STALL_SECONDS + SLACK_SECONDS, seen.summary()
        assert seen.answers[-1][1:] == (200, "alive"), seen.summary()
        assert ready == "ready"
        assert await wait_until(port, "/readyz", task) == "ready"
        # Every worker serves its three paths and nothing else.
        assert (await asyncio.to_thread(get, port, "/metricz"))[0] == 404

        stop.set()
        stopped = True
        # Asked on the loop's own thread before the loop runs again, so before any drain step:
        # the listener's thread answers, and the service is already leaving.
        assert get(port, "/readyz") == (503, "not ready: stopping")
        await asyncio.wait_for(task, timeout=60)
    finally:
        if not stopped:
            stop.set()
        if not task.done():
            await asyncio.wait_for(task, timeout=60)
