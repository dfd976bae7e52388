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

from slotflow.contracts import DeadLettered, FireJobDue, RetryPolicy
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, TimerFirer, TopicReader, job_due, publish

JOBS = 1000
POLICY = RetryPolicy(base=timedelta(seconds=10), cap=timedelta(seconds=40), max_attempts=2)


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

    def retries(self, prefix: str) -> list[float]:
        return [t for job, attempt, t in self.calls if job.startswith(prefix) and attempt >= 2]


def peak_per_second(instants: list[float]) -> int:
    """The most instants falling into one second, counting seconds from the first instant."""
    start = min(instants)
    return max(Counter(int(t - start) for t in instants).values())


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
    async with TimerFirer(kafka, producer, db) as firer:
        jitter_seconds = await storm(kafka, producer, db, start_claimer, "jitter-", random.Random(7))
        flat_seconds = await storm(kafka, producer, db, start_claimer, "flat-", NoJitter())

    def planned(prefix: str) -> list[float]:
        """When the claimer scheduled each retry to hit the dependency (database clock)."""
        return [
            t.fire_at.timestamp()
            for t in firer.timers
            if isinstance(t.on_fire, FireJobDue) and t.on_fire.job.job_id.startswith(prefix)
        ]

    # Every job was tried exactly max_attempts times, and no more.
    per_job = Counter(job for job, _, _ in outage.calls)
    assert len(per_job) == 2 * JOBS
    assert set(per_job.values()) == {POLICY.max_attempts}

    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type, count=2 * JOBS, timeout=60)
    reasons = Counter(letter.data["reason"] for letter in letters)
    assert reasons == {"attempts_exhausted": 2 * JOBS}
    assert {len(letter.data["history"]) for letter in letters} == {POLICY.max_attempts}

    assert len(planned("jitter-")) == len(planned("flat-")) == JOBS * (POLICY.max_attempts - 1)
    jitter_planned, flat_planned = peak_per_second(planned("jitter-")), peak_per_second(planned("flat-"))
    jitter_peak, flat_peak = (
        peak_per_second(outage.retries("jitter-")),
        peak_per_second(outage.retries("flat-")),
    )
    print(  # noqa: T201 - the figures this test exists to report
        f"\nretry storm: {JOBS} jobs x {POLICY.max_attempts} attempts, base {POLICY.base}, cap {POLICY.cap}; "
        f"peak retries per second, full jitter vs no jitter: scheduled {jitter_planned} vs {flat_planned} "
        f"(ratio {jitter_planned / flat_planned:.2f}), reaching the dependency {jitter_peak} vs {flat_peak} "
        f"(ratio {jitter_peak / flat_peak:.2f}); storm wall time {jitter_seconds:.1f} s vs {flat_seconds:.1f} s"
    )
    # Full jitter spreads the herd: its busiest second carries clearly fewer retries, both as
    # scheduled and as they reached the failing dependency.
    assert jitter_planned <= 0.6 * flat_planned
    assert jitter_peak <= 0.85 * flat_peak
