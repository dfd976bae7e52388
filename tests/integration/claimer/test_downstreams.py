"""A downstream that fails for a while and recovers, behind a retry budget and a circuit breaker.

Two claimers (separate Claimer instances: their own pools, consumers and executors; they share
only PostgreSQL and Kafka) run 200 jobs whose handler calls "bank-api". The bank is down at
first: the breaker (one row, shared by both claimers) opens after a few failures, and from then
on runs are held with a durable timer instead of calling the bank; only probes get through, one
per cool-down. Nothing is dead-lettered for the outage and no attempt is spent waiting. When the
bank recovers, a probe closes the breaker and every run completes, once.

The real retry path: held runs go back through StartTimer and the ticker (in-process).
"""

import asyncio
import math
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from slotflow.contracts import RetryPolicy
from slotflow.core.downstreams import retry_allowance
from slotflow.errors import DownstreamUnavailable
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.config import ClaimerSettings
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, job_due, publish
from tests.integration.ticker.support import start_ticker, stop_ticker

JOBS = 200
OUTAGE_SECONDS = 8.0
#: Three attempts: without the breaker, an 8 s outage at these back-offs dead-letters every run.
POLICY = RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=1), max_attempts=3)
BUDGET: dict[str, Any] = {
    "downstream_retry_ratio": 0.2,
    "downstream_min_retries_per_second": 20.0,
    "downstream_window_seconds": 2.0,
    "downstream_failure_rate": 0.5,
    "downstream_min_volume": 5,
    "downstream_cooldown_seconds": 2.0,
    "downstream_probes": 1,
}


class Bank:
    """The dependency: down until `recover`; records every call that reaches it."""

    def __init__(self) -> None:
        self.down = True
        self.calls: list[tuple[str, int, float, bool]] = []  # run id, attempt, when, succeeded

    async def __call__(self, ctx: RunContext) -> dict[str, str]:
        ok = not self.down
        self.calls.append((ctx.run_id, ctx.attempt, time.monotonic(), ok))
        if not ok:
            raise DownstreamUnavailable("bank-api", "bank-api answered 503 (simulated outage)")
        return {"paid": ctx.run_id}


async def test_an_outage_is_waited_out_not_retried_into_the_dlq(
    kafka: KafkaSettings, producer: Producer, db: Pool, pg_dsn: str, start_claimer: StartClaimer
) -> None:
    bank = Bank()
    registry = HandlerRegistry()
    registry.register("test.bank", bank, downstreams=["bank-api"])
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        claimers = [await start_claimer(registry_=registry, max_in_flight=64, **BUDGET) for _ in range(2)]
        jobs = [job_due(f"pay-{i:03d}", handler="test.bank", slot=SLOT, retry=POLICY) for i in range(JOBS)]
        began = time.monotonic()
        await publish(producer, kafka, jobs)

        async def opened() -> bool | None:
            return (
                await db.fetchval("SELECT state = 'open' FROM claimer.downstreams WHERE name = 'bank-api'")
                or None
            )

        await assert_eventually(opened, timeout=30.0, message="the breaker never opened")
        opened_at = time.monotonic()
        while time.monotonic() - began < OUTAGE_SECONDS:
            # The outage lasts a set time by design; meanwhile nothing may reach the DLQ.
            await asyncio.sleep(0.5)
            dead = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'dead_lettered'")
            assert dead == 0, "a run was dead-lettered for the outage"
        outage_calls = list(bank.calls)
        bank.down = False
        recovered = time.monotonic()

        async def all_completed() -> bool | None:
            done = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'completed'")
            return done == JOBS or None

        await assert_eventually(all_completed, timeout=120.0, message="runs not completed after recovery")
        drained = time.monotonic() - recovered

        # Every run completed exactly once, none dead-lettered, and no attempt was spent waiting.
        successes = Counter(run_id for run_id, _, _, ok in bank.calls if ok)
        assert len(successes) == JOBS
        assert set(successes.values()) == {1}
        states = await db.fetch("SELECT state, count(*) AS n FROM claimer.runs GROUP BY state")
        assert {r["state"]: r["n"] for r in states} == {"completed": JOBS}
        spent = await db.fetchval("SELECT max(attempt - round_start + 1) FROM claimer.runs")
        assert spent <= POLICY.max_attempts
        held = await db.fetchval(
            "SELECT count(*) FROM claimer.runs, jsonb_array_elements(history) AS h WHERE h->>'event' = 'held'"
        )
        assert held > 0

        # Calls during the outage: each run's first attempt, plus what the budget let through before
        # the breaker opened, plus one probe per cool-down (twice that for probes written off).
        cfg = ClaimerSettings(**BUDGET)
        outage = recovered - began
        extra = len(outage_calls) - len({run_id for run_id, *_ in outage_calls})
        probes_bound = 2 * cfg.downstream_probes * math.ceil(outage / cfg.downstream_cooldown_seconds + 1)
        budget_bound = retry_allowance(cfg.downstream_policy(), firsts=JOBS)
        after_open = sum(1 for *_, at, _ in outage_calls if at > opened_at + 0.5)
        print(  # noqa: T201 - the figures this test exists to report
            f"\noutage {outage:.1f} s: {len(outage_calls)} calls reached the bank ({extra} beyond first "
            f"attempts; bound {budget_bound + probes_bound}); {after_open} after the breaker opened; "
            f"without budget/breaker {JOBS * POLICY.max_attempts} calls and {JOBS} dead letters; "
            f"{held} holds; drained {drained:.1f} s after recovery"
        )
        changes = await db.fetch(
            "SELECT from_state, to_state, owner, at FROM claimer.downstream_changes ORDER BY id"
        )
        print(" ".join(f"{c['from_state']}->{c['to_state']}" for c in changes))  # noqa: T201
        assert [c["to_state"] for c in changes][:1] == ["open"]
        assert changes[-1]["to_state"] == "closed"  # a probe's success closed it after recovery
        assert after_open <= probes_bound  # an open breaker lets only probes through
        assert extra <= budget_bound + probes_bound
        assert len(outage_calls) < JOBS * POLICY.max_attempts / 2

        # Both claimers consulted the one shared breaker and held runs on its word.
        for claimer in claimers:
            assert claimer.metrics.outcomes_of("held") > 0
    finally:
        await stop_ticker(ticker)
