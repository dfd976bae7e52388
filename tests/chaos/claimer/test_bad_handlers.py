"""Handlers that try to take their claimer down with them, against three claimer processes.

1. A handler raising SystemExit: every claimer stays up, each attempt is recorded as a failure
   with the exception, and the run is dead-lettered when its attempts run out. (It used to end the
   claimer's process; the run's next claimer after the takeover died the same way, and so on.)
2. A handler that kills its process outright (os._exit, as a segfault or the OOM killer would):
   nothing can catch that, so the run is quarantined after a bound on lapsed leases instead of
   being handed to the next claimer forever.
"""

import json
from datetime import timedelta

from slotflow.contracts import DeadLettered, RetryPolicy
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.chaos.claimer.conftest import SpawnClaimer
from tests.chaos.claimer.procs import ClaimerProcess
from tests.integration.claimer.support import TopicReader, attempts, job_due, publish, wait_state
from tests.integration.ticker.support import start_ticker, stop_ticker

LEASE_TTL = 2.0
NAMES = ("claimer-a", "claimer-b", "claimer-c")


async def test_system_exit_in_a_handler_leaves_every_claimer_alive_and_dead_letters_the_run(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, db: Pool, spawn: SpawnClaimer
) -> None:
    procs: list[ClaimerProcess] = [await spawn(name, lease_ttl_seconds=LEASE_TTL) for name in NAMES]
    policy = RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), max_attempts=3)
    job = job_due("merchant-exit", handler="chaos.exit", payload={}, retry=policy)
    ticker = await start_ticker(kafka, pg_dsn)  # keeps the retries' timers
    try:
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "dead_lettered", timeout=60)
    finally:
        await stop_ticker(ticker)
    assert [p.name for p in procs if not p.alive()] == []
    assert row["attempt"] == 3
    assert row["takeovers"] == 0
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    letter = letters[0].data
    assert letter["run_id"] == job.run_id
    assert letter["reason"] == "attempts_exhausted"
    assert letter["error_type"] == "SystemExit"
    assert f"handler gave up on {job.run_id}" in letter["error"]
    assert [h["error_type"] for h in letter["history"]] == ["SystemExit"] * 3


async def test_a_run_that_keeps_killing_its_claimer_is_quarantined_after_the_bound(
    kafka: KafkaSettings, producer: Producer, db: Pool, spawn: SpawnClaimer
) -> None:
    settings = {"lease_ttl_seconds": LEASE_TTL, "max_lease_lapses": 2}
    procs = {name: await spawn(name, **settings) for name in NAMES}
    job = job_due("merchant-crash", handler="chaos.crash", payload={})
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "dead_lettered", timeout=90)
    # Two lapsed leases: the first claimer and the one that took over died in the handler; the
    # third took it over once more and quarantined it without running the handler again.
    assert row["attempt"] == 1
    assert row["fence_token"] == 3
    assert json.loads(row["error"])["reason"] == "quarantined"
    started = [a["owner"] for a in await attempts(db, job.run_id)]
    assert len(started) == 2
    assert {name for name, p in procs.items() if not p.alive()} == set(started)
    assert procs[row["owner"]].alive()
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    letter = letters[0].data
    assert letter["reason"] == "quarantined"
    assert letter["error_type"] == "RunQuarantined"
    assert [h["error_type"] for h in letter["history"]] == ["LeaseExpired", "LeaseExpired", "RunQuarantined"]
