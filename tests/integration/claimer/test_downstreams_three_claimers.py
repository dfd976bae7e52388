"""One breaker, three claimers: they see the same state, obey it, and publish every change once.

Three claimers (separate ClaimerService instances sharing only PostgreSQL and Kafka) run 150
jobs against a bank that is down for a while and then recovers. Each claimer reads the breaker
through its own pool at the same moments and reads the same state; each holds runs on its word;
the recorded changes form one chain (every change starts where the previous ended, whichever
claimer made it), and each change is one DownstreamChanged event on the topic, in the same order.
After recovery every run completes once and none is dead-lettered.
"""

import asyncio
import itertools
import math
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from slotflow.contracts import RetryPolicy
from slotflow.contracts.topics import DOWNSTREAM_EVENTS
from slotflow.errors import DownstreamUnavailable
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, TopicReader, job_due, publish
from tests.integration.ticker.support import start_ticker, stop_ticker

JOBS = 150
#: How long the bank stays down once the breaker has opened.
OUTAGE_SECONDS = 6.0
POLICY = RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=1), max_attempts=3)
BUDGET: dict[str, Any] = {
    "downstream_retry_ratio": 0.2,
    "downstream_min_retries_per_second": 10.0,
    "downstream_window_seconds": 2.0,
    "downstream_failure_rate": 0.5,
    "downstream_min_volume": 5,
    "downstream_cooldown_seconds": 1.5,
    "downstream_probes": 1,
    "downstream_report_interval_seconds": 1.0,
}


class Bank:
    def __init__(self) -> None:
        self.down = True
        self.calls: list[tuple[str, float, bool]] = []

    async def __call__(self, ctx: RunContext) -> dict[str, str]:
        ok = not self.down
        self.calls.append((ctx.run_id, time.monotonic(), ok))
        if not ok:
            raise DownstreamUnavailable("bank-api", "bank-api answered 503 (simulated outage)")
        return {"paid": ctx.run_id}


async def _seen_by(claimer: ClaimerService) -> tuple[str, bool]:
    """The breaker as this claimer's gate reads it (its own pool, the row lock)."""
    async with claimer.pool.acquire() as conn, conn.transaction():
        locked, _ = await claimer.gate.lock(conn, ["bank-api"])
    breaker = locked["bank-api"].breaker
    return breaker.state, breaker.manual


async def test_three_claimers_share_one_breaker(
    kafka: KafkaSettings, producer: Producer, db: Pool, pg_dsn: str, start_claimer: StartClaimer
) -> None:
    bank = Bank()
    registry = HandlerRegistry()
    registry.register("test.bank", bank, downstreams=["bank-api"])
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        async with TopicReader(kafka, DOWNSTREAM_EVENTS) as events:
            claimers = [await start_claimer(registry_=registry, max_in_flight=32, **BUDGET) for _ in range(3)]
            began = time.monotonic()
            await publish(
                producer,
                kafka,
                [job_due(f"pay-{i:03d}", handler="test.bank", slot=SLOT, retry=POLICY) for i in range(JOBS)],
            )

            async def opened() -> bool | None:
                state = await db.fetchval("SELECT state FROM claimer.downstreams WHERE name = 'bank-api'")
                return state == "open" or None

            await assert_eventually(opened, timeout=30.0, message="the breaker never opened")
            opened_at = time.monotonic()

            # Through the outage, the three read one state at the same moments. Every move of the
            # breaker writes a change row in its transaction: a sample with no change between its
            # reads must agree (one taken across a change is set aside and counted).
            samples: list[tuple[str, bool]] = []
            across_a_change = 0
            count_changes = "SELECT count(*) FROM claimer.downstream_changes"
            while time.monotonic() - opened_at < OUTAGE_SECONDS:
                before = await db.fetchval(count_changes)
                seen = await asyncio.gather(*(_seen_by(c) for c in claimers))
                if await db.fetchval(count_changes) != before:
                    across_a_change += 1
                else:
                    assert len(set(seen)) == 1, f"the claimers disagree on the breaker: {seen}"
                    samples.append(seen[0])
                await asyncio.sleep(0.2)
            assert len(samples) >= 5
            outage_calls = list(bank.calls)
            bank.down = False
            recovered = time.monotonic()

            async def all_completed() -> bool | None:
                done = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'completed'")
                return done == JOBS or None

            await assert_eventually(all_completed, timeout=120.0, message="runs not completed after recovery")
            drained = time.monotonic() - recovered
            closed = await asyncio.gather(*(_seen_by(c) for c in claimers))
            assert set(closed) == {("closed", False)}

            successes = Counter(run_id for run_id, _, ok in bank.calls if ok)
            assert len(successes) == JOBS
            assert set(successes.values()) == {1}, "a run reached the bank twice after recovery"
            dead = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'dead_lettered'")
            assert dead == 0
            for claimer in claimers:
                assert claimer.metrics.outcomes_of("held") > 0, "a claimer ignored the breaker"

            # One chain of changes, whoever made them, and one event per change, in order.
            changes = await db.fetch(
                "SELECT id, from_state, to_state, owner FROM claimer.downstream_changes "
                "WHERE name = 'bank-api' ORDER BY id"
            )
            assert changes[0]["from_state"] == "closed"
            for earlier, later in itertools.pairwise(changes):
                assert later["from_state"] == earlier["to_state"], f"a broken chain: {earlier} then {later}"
            assert changes[-1]["to_state"] == "closed"

            async def all_published() -> list[Any] | None:
                await events.drain()
                published = events.of_type("downstream.changed")
                return published if len(published) >= len(changes) else None

            published = await assert_eventually(all_published, timeout=30.0, message="changes not published")
            assert [e.id for e in published] == [f"bank-api/{c['id']}" for c in changes]
            assert [(e.data["from_state"], e.data["to_state"]) for e in published] == [
                (c["from_state"], c["to_state"]) for c in changes
            ]
            owners = Counter(c["owner"] for c in changes)

        cooldown = BUDGET["downstream_cooldown_seconds"]
        after_open = sum(1 for _, at, _ in outage_calls if at > opened_at + 0.5)
        probes_bound = 2 * math.ceil((recovered - opened_at) / cooldown + 1)
        print(  # noqa: T201 - the figures this test exists to report
            f"\nthree claimers, outage {recovered - began:.1f} s: {len(outage_calls)} calls reached the bank, "
            f"{after_open} after the breaker opened (bound {probes_bound}); {len(changes)} changes by "
            f"{len(owners)} claimers {dict(owners)}; {len(samples)} samples agreed "
            f"({dict(Counter(s for s, _ in samples))}), {across_a_change} set aside; drained {drained:.1f} s after recovery"
        )
        assert after_open <= probes_bound
    finally:
        await stop_ticker(ticker)
