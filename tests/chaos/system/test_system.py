"""The whole system under a seeded fault plan, judged by the independent checker.

Run with `make chaos` (SEED=, DURATION=, PROFILE=); plain `pytest tests` leaves it out, since it
starts a Kafka and a PostgreSQL of its own and takes minutes (tests/conftest.py deselects it
unless `-m system` asks for it).
"""

import asyncio
import functools
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from slotflow.errors import SlotflowError
from slotflow.kafka.producer import Producer
from tests.chaos.system.checker import (
    FAULT_WINDOW,
    Report,
    check,
    figures_by_fault_kind,
    render_by_fault_kind,
)
from tests.chaos.system.harness import PROFILES, PrivateStack, System, fault_plan, given_plan
from tests.chaos.system.hostile import HostileAct, HostileActor, hostile_plan

_OVERRIDES: dict[str, Any] = (
    {"duration_s": float(os.environ["SLOTFLOW_SYSTEM_DURATION"])}
    if os.environ.get("SLOTFLOW_SYSTEM_DURATION")
    else {}
)
# A shorter run of a profile keeps its fault density only when the count shrinks with it.
if os.environ.get("SLOTFLOW_SYSTEM_FAULT_COUNT"):
    _OVERRIDES["faults"] = int(os.environ["SLOTFLOW_SYSTEM_FAULT_COUNT"])
PROFILE = replace(PROFILES[os.environ.get("SLOTFLOW_SYSTEM_PROFILE", "short")], **_OVERRIDES)
SEEDS = [int(s) for s in os.environ.get("SLOTFLOW_SYSTEM_SEEDS", "1,2,3").split(",") if s.strip()]
QUIET_S = 150.0
#: Past the quiet period the run keeps waiting while a backlog the faults left still drains (fewer
#: outstanding slots, runs and workflows), for up to this long, and reports how long it took.
#: Lateness is a figure of the run and "never" is a violation: DRAIN_STALL_S without progress ends
#: the wait, and whatever is still outstanding then fails the run.
DRAIN_MAX_S = {"short": 300.0, "long": 1800.0}.get(PROFILE.name, 600.0)
#: How long the drain waits without progress before it calls what is left "never". One 20 s look
#: was too short: in the hour-long run of 2026-12-07 the count stood still for one look (leases of
#: runs the last faults interrupted running out, consumers rejoining) and the wait ended with the
#: backlog seven minutes from done; every outbox row was published and every effect applied after.
DRAIN_STALL_S = 180.0
#: Violations that may only say "not yet": the effect, the end or the publication is still to come
#: while claimers work through a backlog, and a snapshot taken mid-flight can see a result before
#: the effect beside it. Each is judged again after the drain; none is forgiven.
NOT_YET = frozenset(
    {
        "missed slot",
        "missed timer",
        "unfinished run",
        "unfinished workflow",
        "unpublished outbox row",
        "ledger row with no effect",
        "activity result the real activity did not produce",
    }
)
#: Violation kinds of known, reported bugs (docs/reliability.md) that are printed but do not fail
#: the run, so CI stays green while the bug is open: comma-separated, e.g. "missed slot".
KNOWN = {k.strip() for k in os.environ.get("SLOTFLOW_SYSTEM_KNOWN", "").split(",") if k.strip()}

pytestmark = [pytest.mark.system, pytest.mark.timeout(PROFILE.duration_s + QUIET_S + DRAIN_MAX_S + 300)]


@pytest.fixture(scope="module")
def stack() -> Iterator[PrivateStack]:
    """One private stack for all seeds (starting a broker costs tens of seconds)."""
    private = PrivateStack()
    asyncio.run(private.up())
    yield private
    # SLOTFLOW_SYSTEM_KEEP_STACK=1 keeps it for the next run (iterating on the suite).
    if not os.environ.get("SLOTFLOW_SYSTEM_KEEP_STACK"):
        asyncio.run(private.down())


async def retrying(what: Callable[[], Awaitable[Any]], timeout: float = 90.0) -> Any:
    """The workload's own sends ride out the broker restarts it injects."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await what()
        except (SlotflowError, OSError, KafkaError, asyncpg.PostgresError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


@pytest.mark.parametrize("seed", SEEDS)
async def test_every_promise_holds_under_the_seeded_faults(
    stack: PrivateStack, seed: int, tmp_path: Path
) -> None:
    system = System(stack, seed, PROFILE, tmp_path)
    await system.prepare()
    system.start_services()
    # SLOTFLOW_SYSTEM_FAULTS (make chaos FAULTS=...) replaces the seeded plan to replay one fault.
    given = os.environ.get("SLOTFLOW_SYSTEM_FAULTS", "")
    plan = (
        given_plan(given)
        if given
        else fault_plan(seed, PROFILE, [n for n in system.services if n != "api"], stack.brokers)
    )
    # The hostile actor's plan, seeded from a stream of its own (no fault moves); none when a
    # plan is given (replaying faults) unless SLOTFLOW_SYSTEM_HOSTILE=1 asks for it.
    hostile = (
        hostile_plan(seed, PROFILE.hostile, PROFILE.duration_s)
        if not given or os.environ.get("SLOTFLOW_SYSTEM_HOSTILE") == "1"
        else []
    )
    system.say(f"profile {PROFILE}; logs in {tmp_path}")
    system.say("fault plan:\n" + "\n".join(f"    {f}" for f in plan))
    system.say("hostile plan:\n" + "\n".join(f"    {a}" for a in hostile))
    actor = HostileActor(
        seed,
        system.kafka,
        registered=system.signers["mallory"],
        genuine=system.signer,
        timers=system.workload.timers,
    )
    rng = random.Random(seed)
    injected: list[tuple[str, datetime]] = []
    try:
        await system.wait_ready()
        async with Producer(system.kafka, client_id="system-workload") as producer:
            raw = AIOKafkaProducer(bootstrap_servers=system.kafka.bootstrap, acks="all")
            await raw.start()
            try:
                start_at = (await system.db_now()).replace(microsecond=0) + __import__("datetime").timedelta(
                    seconds=10
                )
                await retrying(lambda: system.send_workload(producer, start_at))
                await actor.start()
                hostile_acts: list[asyncio.Future[None]] = []

                async def hostile_act(act: HostileAct) -> None:
                    sent = await retrying(functools.partial(actor.act, producer, act.kind))
                    system.say(f"{act}: {sent} records")

                t0 = time.monotonic()
                pending = list(plan)
                acts = list(hostile)
                orders_per_tick = max(1, round(PROFILE.orders / max(PROFILE.duration_s / 2, 1)))
                tick = 0
                # Every planned fault is injected, even when slow ones (a PostgreSQL restart) overrun.
                while (elapsed := time.monotonic() - t0) < PROFILE.duration_s + 10 or pending:
                    while pending and pending[0].at_s + 10 <= elapsed:
                        fault = pending.pop(0)
                        system.say(f"inject {fault}")
                        injected.append((fault.kind, datetime.now(UTC)))
                        await system.inject(fault)
                        if fault.kind == "poison_burst":
                            await retrying(lambda: system.poison(raw, 5))
                    while acts and acts[0].at_s + 10 <= elapsed:
                        # Its own task: an act may wait seconds for a target, the faults do not.
                        act = acts.pop(0)
                        hostile_acts.append(asyncio.ensure_future(hostile_act(act)))
                    if len(system.workload.orders) < PROFILE.orders and elapsed > 10:
                        await retrying(lambda: system.start_orders(producer, rng, orders_per_tick))
                    if tick % 3 == 0:
                        await retrying(lambda: system.poison(raw, 1))
                    if tick % 5 == 0:
                        await retrying(lambda: system.invalid_command(producer))
                    system.supervise()
                    tick += 1
                    await asyncio.sleep(2.0)
                await system.finish_sends()  # the mid-saga cancels and the operator's acts still to go
                await system.operator.bulk()  # bulk redrives by reason, each previewed first
                await asyncio.gather(*hostile_acts)
            finally:
                await raw.stop()
                await actor.stop()
        # Quiet period: no more faults; everything the workload asked for must now finish.
        deadline = time.monotonic() + QUIET_S
        system.workload.hostile = list(actor.records)
        recording = await system.collect()
        report: Report = check(recording)
        while time.monotonic() < deadline and (
            any(v.kind not in KNOWN for v in report.violations)
            or (report.violations and time.monotonic() < deadline - QUIET_S + 45)
        ):
            await asyncio.sleep(5.0)
            system.supervise()
            recording = await system.collect()
            report = check(recording)
        drain_started = progressed_at = time.monotonic()
        outstanding = len(report.violations)
        while (
            report.violations
            and all(v.kind in NOT_YET for v in report.violations)
            and time.monotonic() - drain_started < DRAIN_MAX_S
        ):
            await asyncio.sleep(20.0)
            system.supervise()
            recording = await system.collect()
            report = check(recording)
            if len(report.violations) < outstanding:
                progressed_at = time.monotonic()
                outstanding = len(report.violations)
            elif time.monotonic() - progressed_at >= DRAIN_STALL_S:
                break  # no progress for DRAIN_STALL_S: what is left is not coming
        if time.monotonic() - drain_started > 1.0:
            system.say(
                f"the backlog drained for {time.monotonic() - drain_started:.0f} s past the quiet period; "
                f"{len(report.violations)} violations left"
            )
        if report.violations:
            for name, gauge in (await system.claimer_gauges()).items():
                system.say(f"{name}: {gauge}")
    finally:
        system.stop_services()
        await system.close_proxies()
    faults = ", ".join(f"{k}={n}" for k, n in sorted(system.counts.items()))
    hostile_by_kind = Counter(r.kind for r in actor.records)
    hostile_sent = ", ".join(f"{k}={n}" for k, n in sorted(hostile_by_kind.items()))
    system.say(
        f"faults injected: {faults}\nhostile records: {len(actor.records)} in {actor.acts} acts "
        f"({hostile_sent})\nverdict:\n{report.render()}"
    )
    if injected:
        by_kind = figures_by_fault_kind(recording, injected, system.fence_refusals())
        system.say(
            f"by fault kind ({FAULT_WINDOW.total_seconds():.0f} s after each):\n{render_by_fault_kind(by_kind)}"
        )
    failing = [v for v in report.violations if v.kind not in KNOWN]
    if len(failing) < len(report.violations):
        system.say(f"known bugs, not failing the run: {len(report.violations) - len(failing)} violations")
    assert not failing, f"seed {seed}: {len(failing)} violations\n{report.render()}"
