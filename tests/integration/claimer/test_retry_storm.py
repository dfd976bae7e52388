"""1,000 jobs failing against one outage: full jitter spreads their retries, and every one ends in
the DLQ after its last attempt.

The same run measures a no-jitter baseline (each wait is the whole `min(cap, base * 2**attempt)`)
on another 1,000 jobs and compares the peak number of retries reaching the failing dependency in
any one second. The figures are printed (run with -s) and recorded in docs/benchmarks/claimer.md.

The retry timers are fired by `TimerFirer`, a test double for the ticker's one-shot timers, not by
the real ticker: the ticker applies commands one transaction each and stored 17-60 StartTimers/s
on this shared 2-core box, so 2 x 3,000 retry timers took minutes and the measured spread was the
ticker's intake rate (60 vs 76 retries/s), not the jitter. `test_with_ticker.py` and
`test_failures.py` run retries through the real ticker.
"""

import math
import random
import time
from collections import Counter
from datetime import timedelta

from slotflow.contracts import DeadLettered, RetryPolicy
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, TimerFirer, TopicReader, job_due, publish

JOBS = 1000
POLICY = RetryPolicy(base=timedelta(seconds=2), cap=timedelta(seconds=8), max_attempts=4)


class NoJitter(random.Random):
    """Every draw at the top of the range: the wait is the whole ceiling, identical for every job."""

    def random(self) -> float:
        return math.nextafter(1.0, 0.0)


class Outage:
    """A dependency that is down for the whole test; records when each attempt reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float]] = []

    async def __call__(self, ctx: RunContext) -> None:
        self.calls.append((ctx.job_id, ctx.attempt, time.monotonic()))
        raise ConnectionError("payments gateway unavailable (simulated outage)")

    def peak_retries_per_second(self, prefix: str) -> int:
        times = [t for job, attempt, t in self.calls if job.startswith(prefix) and attempt >= 2]
        start = min(times)
        return max(Counter(int(t - start) for t in times).values())


async def storm(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_claimer: StartClaimer,
    prefix: str,
    rng: random.Random,
) -> float:
    claimer = await start_claimer(rng=rng, max_in_flight=256, lease_ttl_seconds=10.0)
    began = time.monotonic()
    jobs = [job_due(f"{prefix}{i:04d}", handler="test.outage", slot=SLOT, retry=POLICY) for i in range(JOBS)]
    await publish(producer, kafka, jobs)

    async def all_dead() -> bool:
        count = await db.fetchval(
            "SELECT count(*) FROM claimer.runs WHERE job_id LIKE $1 AND state = 'dead_lettered' AND attempt = $2",
            prefix + "%",
            POLICY.max_attempts,
        )
        return int(count) == JOBS

    await assert_eventually(all_dead, timeout=120, interval=0.5, message=f"{prefix}: all dead-lettered")
    await claimer.stop(grace=1.0)
    return time.monotonic() - began


async def test_a_thousand_jobs_in_an_outage_retry_spread_out_and_end_in_the_dlq(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    outage = Outage()
    registry.register("test.outage", outage)
    async with TimerFirer(kafka, producer, db):
        jitter_seconds = await storm(kafka, producer, db, start_claimer, "jitter-", random.Random(7))
        flat_seconds = await storm(kafka, producer, db, start_claimer, "flat-", NoJitter())

    # Every job was tried exactly max_attempts times, and no more.
    per_job = Counter(job for job, _, _ in outage.calls)
    assert len(per_job) == 2 * JOBS
    assert set(per_job.values()) == {POLICY.max_attempts}

    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type, count=2 * JOBS, timeout=60)
    reasons = Counter(letter.data["reason"] for letter in letters)
    assert reasons == {"attempts_exhausted": 2 * JOBS}
    assert {len(letter.data["history"]) for letter in letters} == {POLICY.max_attempts}

    jitter_peak = outage.peak_retries_per_second("jitter-")
    flat_peak = outage.peak_retries_per_second("flat-")
    print(  # noqa: T201 - the figures this test exists to report
        f"\nretry storm: {JOBS} jobs x {POLICY.max_attempts} attempts, base {POLICY.base}, cap {POLICY.cap}: "
        f"peak retries/s full jitter {jitter_peak} vs no jitter {flat_peak} "
        f"(ratio {jitter_peak / flat_peak:.2f}); storm wall time {jitter_seconds:.1f} s vs {flat_seconds:.1f} s"
    )
    # Full jitter spreads the herd: its busiest second carries clearly fewer retries.
    assert jitter_peak <= 0.85 * flat_peak
