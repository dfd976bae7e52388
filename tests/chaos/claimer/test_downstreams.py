"""Two claimer processes, one failing downstream: the breaker they share bounds what reaches it.

`python -m slotflow_claimer` twice (tests/chaos/claimer/procs.py), 200 runs of `chaos.bank`, whose
dependency is down for 8 s and then recovers (a row both processes read). The processes share
nothing but PostgreSQL and Kafka: one breaker row decides for both. Nothing is dead-lettered for
the outage, only probes reach the bank while the breaker is open, and every run completes once.
"""

import asyncio
import math
import time
from datetime import timedelta

from slotflow.contracts import RetryPolicy
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.chaos.claimer.conftest import SpawnClaimer
from tests.integration.claimer.support import SLOT, job_due, publish
from tests.integration.ticker.support import start_ticker, stop_ticker

JOBS = 200
OUTAGE_SECONDS = 8.0
COOLDOWN = 2.0
POLICY = RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=1), max_attempts=3)
BUDGET = {
    "downstream_retry_ratio": 0.2,
    "downstream_min_retries_per_second": 20.0,
    "downstream_window_seconds": 2.0,
    "downstream_failure_rate": 0.5,
    "downstream_min_volume": 5,
    "downstream_cooldown_seconds": COOLDOWN,
    "downstream_probes": 1,
}


async def test_two_processes_share_one_breaker_through_an_outage(
    kafka: KafkaSettings, producer: Producer, db: Pool, pg_dsn: str, spawn: SpawnClaimer
) -> None:
    await db.execute("CREATE TABLE bank_state (down boolean NOT NULL)")
    await db.execute("INSERT INTO bank_state VALUES (true)")
    await db.execute(
        "CREATE TABLE bank_calls (run_id text, attempt int, owner text, ok boolean, at timestamptz DEFAULT now())"
    )
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        procs = [await spawn(name, lease_ttl_seconds=5.0, **BUDGET) for name in ("claimer-a", "claimer-b")]
        jobs = [job_due(f"bank-{i:03d}", handler="chaos.bank", slot=SLOT, retry=POLICY) for i in range(JOBS)]
        await publish(producer, kafka, jobs)
        began = time.monotonic()

        async def opened() -> bool | None:
            return (
                await db.fetchval("SELECT state = 'open' FROM claimer.downstreams WHERE name = 'bank-api'")
                or None
            )

        await assert_eventually(opened, timeout=60.0, message="the breaker never opened")
        opened_at = await db.fetchval(
            "SELECT at FROM claimer.downstream_changes WHERE to_state = 'open' ORDER BY id LIMIT 1"
        )
        while time.monotonic() - began < OUTAGE_SECONDS:
            # The outage lasts a set time by design; meanwhile nothing may reach the DLQ.
            await asyncio.sleep(0.5)
            dead = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'dead_lettered'")
            assert dead == 0, "a run was dead-lettered for the outage"
        await db.execute("UPDATE bank_state SET down = false")
        recovered_at = await db.fetchval("SELECT now()")

        async def all_completed() -> bool | None:
            done = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'completed'")
            return done == JOBS or None

        await assert_eventually(all_completed, timeout=180.0, interval=0.5, message="runs not completed")

        paid = await db.fetch("SELECT run_id, count(*) AS n FROM bank_calls WHERE ok GROUP BY run_id")
        assert len(paid) == JOBS
        assert {r["n"] for r in paid} == {1}
        states = await db.fetch("SELECT state, count(*) AS n FROM claimer.runs GROUP BY state")
        assert {r["state"]: r["n"] for r in states} == {"completed": JOBS}

        # While the breaker was open (from its first opening, half a second of in-flight calls
        # aside, to the recovery) only probes reached the bank: at most one per cool-down, twice
        # that for probes written off.
        outage = (recovered_at - opened_at).total_seconds()
        during = await db.fetchval(
            "SELECT count(*) FROM bank_calls WHERE at > $1::timestamptz + interval '0.5 s' AND at < $2",
            opened_at,
            recovered_at,
        )
        bound = 2 * math.ceil(outage / COOLDOWN + 1)
        total = await db.fetchval("SELECT count(*) FROM bank_calls WHERE at < $1", recovered_at)
        owners = await db.fetch("SELECT DISTINCT owner FROM claimer.downstream_changes")
        changes = await db.fetch("SELECT to_state FROM claimer.downstream_changes ORDER BY id")
        print(  # noqa: T201 - the figures this test exists to report
            f"\n{total} calls reached the bank before recovery ({JOBS * POLICY.max_attempts} without "
            f"budget/breaker), {during} while open over {outage:.1f} s (bound {bound}); "
            f"transitions {[c['to_state'] for c in changes]} by {sorted(o['owner'] for o in owners)}"
        )
        assert during <= bound
        assert changes[-1]["to_state"] == "closed"
        for proc in procs:
            samples = await proc.metrics()
            held = sum(
                value
                for name, value in samples.items()
                if name.startswith("slotflow_claimer_run_outcomes_total{outcome=held,")
            )
            assert held > 0, f"{proc.name} held nothing"
    finally:
        await stop_ticker(ticker)
