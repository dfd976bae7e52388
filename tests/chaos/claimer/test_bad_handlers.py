"""Handlers that try to take their claimer down with them, against three claimer processes.

1. A handler raising SystemExit: every claimer stays up, each attempt is recorded as a failure
   with the exception, and the run is dead-lettered when its attempts run out. (It used to end the
   claimer's process; the run's next claimer after the takeover died the same way, and so on.)
2. A handler that kills its process outright (os._exit, as a segfault or the OOM killer would):
   nothing can catch that, so the run is quarantined after a bound on lapsed leases instead of
   being handed to the next claimer forever.
3. A plain def that blocks runs in a thread: the heartbeats of the claimer's other runs go on,
   nothing is taken over, each run pays once.
4. An async def that blocks the loop: the watchdog names it; the loop renews nothing meanwhile,
   so the other claimer takes the run over and the fence refuses the blocked one's late payout.
"""

import json
from datetime import timedelta
from pathlib import Path

from slotflow.contracts import DeadLettered, RetryPolicy
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess
from tests.chaos.claimer.conftest import SpawnClaimer
from tests.chaos.claimer.test_failover import owner_of_first_claim, phases
from tests.integration.claimer.support import TopicReader, attempts, job_due, ledger, publish, wait_state
from tests.integration.ticker.support import start_ticker, stop_ticker

LEASE_TTL = 2.0
NAMES = ("claimer-a", "claimer-b", "claimer-c")


async def test_system_exit_in_a_handler_leaves_every_claimer_alive_and_dead_letters_the_run(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, db: Pool, spawn: SpawnClaimer
) -> None:
    procs: list[ServiceProcess] = [await spawn(name, lease_ttl_seconds=LEASE_TTL) for name in NAMES]
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


async def test_a_blocking_plain_def_handler_runs_in_a_thread_and_freezes_no_heartbeat(
    kafka: KafkaSettings, producer: Producer, db: Pool, spawn: SpawnClaimer
) -> None:
    first = await spawn("claimer-a", lease_ttl_seconds=LEASE_TTL)
    blocking = job_due(
        "merchant-sync", handler="chaos.sync_payout", payload={"amount_cents": 100, "block_s": 10}
    )
    # An async run on the same claimer: its lease is renewed only if the loop keeps running.
    neighbour = job_due(
        "merchant-neighbour", handler="chaos.payout", payload={"amount_cents": 200, "hold_s": 10}
    )
    await publish(producer, kafka, [blocking, neighbour])
    for job in (blocking, neighbour):
        assert await owner_of_first_claim(db, job.run_id) == "claimer-a"
    # A second claimer that would take over any lease the first let lapse (5 leases of blocking).
    second = await spawn("claimer-b", lease_ttl_seconds=LEASE_TTL)
    for job in (blocking, neighbour):
        row = await wait_state(db, job.run_id, "completed", timeout=60)
        assert (row["owner"], row["fence_token"], row["takeovers"]) == ("claimer-a", 1, 0)
    paid = {p["run_id"]: (p["fence_token"], p["paid_by"]) for p in await ledger(db)}
    assert paid == {blocking.run_id: (1, "claimer-a"), neighbour.run_id: (1, "claimer-a")}
    assert first.alive()
    assert second.alive()
    assert (await second.metrics()).get("slotflow_claimer_takeovers_total", 0) == 0


async def test_a_handler_blocking_the_loop_is_named_and_the_fence_stops_a_second_effect(
    kafka: KafkaSettings, producer: Producer, db: Pool, spawn: SpawnClaimer, tmp_path: Path
) -> None:
    procs = {name: await spawn(name, lease_ttl_seconds=LEASE_TTL) for name in NAMES[:2]}
    release = tmp_path / "release-the-blocked-loop"
    job = job_due(
        "merchant-blocker",
        handler="chaos.loop_blocker",
        payload={"amount_cents": 300, "release": str(release), "block_s": 120},
    )
    await publish(producer, kafka, [job])
    victim = await owner_of_first_claim(db, job.run_id)
    rival = next(name for name in procs if name != victim)
    # The victim's loop is stuck: it renews nothing, so its lease lapses and the rival takes over
    # with token 2 and pays. (Renewing from elsewhere would keep a stuck claimer's runs hostage.)
    row = await wait_state(db, job.run_id, "completed", timeout=60)
    assert (row["owner"], row["fence_token"]) == (rival, 2)
    # Only now is the victim's loop let go, so its payout is late whatever the load: it used to
    # block for a fixed 8 s, and its overdue heartbeat could cancel the handler before the payout
    # was sent, so the refusal this test waits for sometimes never came (the write runs on now).
    release.touch()

    async def refused() -> bool:
        return ("rejected", 1, victim) in phases(await attempts(db, job.run_id))

    await assert_eventually(refused, timeout=30, message="the blocked claimer's late payout refused")
    assert [(p["fence_token"], p["paid_by"]) for p in await ledger(db)] == [(2, rival)]
    assert procs[victim].alive()

    async def blamed() -> float:
        metrics = await procs[victim].metrics()
        return float(metrics.get("slotflow_claimer_loop_blocked_total{handler=chaos.loop_blocker}", 0))

    assert await assert_eventually(blamed, timeout=15, message="the stall blamed on its handler") >= 1
    assert "event loop blocked" in procs[victim].log()
    assert "by handler chaos.loop_blocker" in procs[victim].log()
