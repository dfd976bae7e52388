"""A worker's probes (slotflow.health): liveness from the loop's heartbeat, readiness from its
gates and probes, both answered by a listener thread on a real loopback socket while the loop
itself is blocked."""

import asyncio
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, Counter

from slotflow.health import Health, groups_joined, health_listener
from slotflow.service import Supervisor
from slotflow.testing.processes import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def health_at(clock: Clock, *, check_every: float = 5.0, stale_after: float = 15.0) -> Health:
    return Health("test", stall_after=30.0, check_every=check_every, stale_after=stale_after, clock=clock)


def test_alive_while_the_heartbeat_is_younger_than_the_threshold_and_says_how_long_it_stalled() -> None:
    clock = Clock()
    health = health_at(clock)
    assert health.liveness() == (200, "alive")  # no beat yet: the listener opened before it
    health.beat()
    clock.now += 30.0
    assert health.liveness() == (200, "alive")
    clock.now += 12.0
    assert health.liveness() == (503, "event loop stalled for 42.0 s (more than 30 s)")
    health.beat()
    assert health.liveness() == (200, "alive")


async def test_ready_only_once_every_gate_passes_and_every_probe_succeeded_lately() -> None:
    clock = Clock()
    health = health_at(clock, stale_after=10.0)
    started = [False]
    postgres_up = [True]

    async def postgres() -> None:
        if not postgres_up[0]:
            raise ConnectionRefusedError("connection refused")

    async def kafka() -> None:
        return None

    health.gate("loops", lambda: None if started[0] else "not started yet")
    health.probe("postgres", postgres)
    health.probe("kafka", kafka)
    status, reason = health.readiness()
    assert status == 503
    assert reason.startswith("not ready: starting")  # no gate read yet

    health.beat()
    assert health.readiness() == (
        503,
        "not ready: loops: not started yet; postgres: not checked yet; kafka: not checked yet",
    )
    await health.check("postgres")
    await health.check("kafka")
    started[0] = True
    health.beat()
    assert health.readiness() == (200, "ready")

    # PostgreSQL goes away: one failed check is not enough, an old last success is.
    postgres_up[0] = False
    clock.now += 5.0
    health.beat()
    await health.check("postgres")
    await health.check("kafka")
    assert health.readiness() == (200, "ready")
    clock.now += 7.0
    health.beat()
    await health.check("kafka")
    assert health.readiness() == (
        503,
        "not ready: postgres: unreachable for 12 s: ConnectionRefusedError: connection refused",
    )
    postgres_up[0] = True
    await health.check("postgres")
    assert health.readiness() == (200, "ready")


async def test_a_probe_that_hangs_counts_as_a_failure_and_a_probe_not_run_lately_says_so() -> None:
    clock = Clock()
    health = health_at(clock, check_every=0.05, stale_after=15.0)
    hanging = [False]

    async def kafka() -> None:
        if hanging[0]:
            await asyncio.sleep(10)

    health.probe("kafka", kafka)
    health.beat()
    await health.check("kafka")
    assert health.readiness() == (200, "ready")
    clock.now += 16.0
    health.beat()
    # No failure recorded, only no check since: a busy loop, not a broker away.
    assert health.readiness() == (503, "not ready: kafka: not checked for 16 s")
    hanging[0] = True
    await health.check("kafka")
    assert health.readiness() == (503, "not ready: kafka: unreachable for 16 s: no answer within 0.05 s")


async def test_a_stopping_service_is_not_ready_and_a_stalled_one_is_neither() -> None:
    clock = Clock()
    health = health_at(clock)
    stop = asyncio.Event()
    health.start(stop)
    try:
        health.beat()
        assert health.readiness() == (200, "ready")
        clock.now += 31.0
        assert health.readiness() == (503, "not ready: event loop stalled for 31.0 s (more than 30 s)")
        health.beat()
        stop.set()
        assert health.readiness() == (503, "not ready: stopping")
        assert health.liveness() == (200, "alive")  # a drain is alive: only readiness says it leaves
    finally:
        health.close()
        await asyncio.sleep(0)  # the cancelled task ends


def test_a_gate_that_raises_is_a_problem_not_a_crash() -> None:
    health = health_at(Clock())

    def broken() -> str | None:
        raise RuntimeError("boom")

    health.gate("consumers", broken)
    health.beat()
    assert health.readiness() == (503, "not ready: consumers: RuntimeError: boom")


@dataclass
class Member:
    group_id: str
    assignments: int = 0


def test_groups_joined_waits_for_every_consumer_s_first_assignment() -> None:
    letters, commands = Member("dlq-letters"), Member("dlq-commands")
    started: list[Member | None] = [None, None]
    gate = groups_joined(lambda: started)
    assert gate() == "consumers not started yet"
    started[:] = [letters, commands]
    assert gate() == "not yet in group dlq-letters, dlq-commands"
    letters.assignments = 1
    assert gate() == "not yet in group dlq-commands"
    commands.assignments = 3
    assert gate() is None


async def test_the_supervisor_says_whether_its_loops_run() -> None:
    loops = Supervisor("test")

    async def idle(stop: asyncio.Event) -> None:
        await stop.wait()

    async def crash(stop: asyncio.Event) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("crashed")

    loops.add("idle", idle)
    assert loops.problem() == "not started yet"
    stop = asyncio.Event()
    running = asyncio.create_task(loops.run(stop))
    await loops.running.wait()
    assert loops.problem() is None
    stop.set()
    await running
    assert loops.problem() == "not running"

    crashing = Supervisor("test")
    crashing.add("idle", idle)
    crashing.add("crasher", crash)
    with pytest.raises(RuntimeError):
        await crashing.run(asyncio.Event())
    assert crashing.problem() == "the crasher loop crashed"


def get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - our own listener
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def test_the_listener_answers_liveness_from_its_own_thread_while_the_loop_is_blocked() -> None:
    """prometheus_client's /metrics answered 200 in milliseconds while the loop was blocked; the
    heartbeat goes stale instead, and the listener's thread says so."""
    health = Health("test", stall_after=0.3, beat_every=0.05)
    port = free_port()
    stop = asyncio.Event()
    seen: list[tuple[int, str]] = []

    def ask_while_blocked(blocked: threading.Event) -> None:
        blocked.wait(5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            status, text = get(port, "/livez")
            seen.append((status, text))
            if status == 503:
                return
            time.sleep(0.05)

    with health_listener(health, CollectorRegistry(), port=port, host="127.0.0.1", stop=stop):
        await asyncio.sleep(0.1)
        assert await asyncio.to_thread(get, port, "/livez") == (200, "alive\n")
        blocked = threading.Event()
        asker = threading.Thread(target=ask_while_blocked, args=(blocked,))
        asker.start()
        blocked.set()
        time.sleep(1.5)  # the loop blocked, as a synchronous call in a handler would block it
        await asyncio.to_thread(asker.join, 5)
        assert seen, "no answer while the loop was blocked"
        assert seen[-1][0] == 503, seen
        assert seen[-1][1].startswith("event loop stalled for "), seen
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(get, port, "/livez") == (200, "alive\n")


async def test_the_listener_serves_metrics_readiness_and_nothing_else() -> None:
    registry = CollectorRegistry()
    Counter("slotflow_test_things", "Things.", registry=registry).inc()
    health = Health("test", stall_after=30.0, beat_every=0.05)
    health.gate("loops", lambda: "not started yet")
    port = free_port()
    stop = asyncio.Event()
    with health_listener(health, registry, port=port, host="127.0.0.1", stop=stop):
        await asyncio.sleep(0.1)
        status, text = await asyncio.to_thread(get, port, "/metrics")
        assert status == 200
        assert "slotflow_test_things_total 1.0" in text
        assert await asyncio.to_thread(get, port, "/readyz") == (503, "not ready: loops: not started yet\n")
        assert (await asyncio.to_thread(get, port, "/ready"))[0] == 404
        assert (await asyncio.to_thread(get, port, "/livez", "POST"))[0] == 405
        assert await asyncio.to_thread(get, port, "/livez", "HEAD") == (200, "")
        stop.set()
        assert await asyncio.to_thread(get, port, "/readyz") == (503, "not ready: stopping\n")


async def test_no_port_no_listener_and_no_heartbeat() -> None:
    health = Health("test", stall_after=30.0)
    with health_listener(health, CollectorRegistry(), port=0, host="127.0.0.1", stop=asyncio.Event()):
        await asyncio.sleep(0)
        assert health.stalled_for() == 0.0
