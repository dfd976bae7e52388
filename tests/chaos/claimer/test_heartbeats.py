"""A claimer frozen (SIGSTOP) in the middle of a heartbeating run, its lease far from lapsing: the
other claimer's reaper fails the silent attempt by its heartbeat_timeout, the retry resumes from the
recorded details and pays once, and the frozen claimer, woken, has its late outcome refused."""

import json
import signal
from datetime import datetime, timedelta

from slotflow.contracts import RetryPolicy
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess
from tests.chaos.claimer.conftest import SpawnClaimer
from tests.chaos.claimer.test_failover import owner_of_first_claim, phases
from tests.integration.claimer.support import attempts, job_due, ledger, publish, wait_state
from tests.integration.ticker.support import start_ticker, stop_ticker

#: Far longer than the heartbeat timeout: a lapse would take 30 s, the silence ends it in seconds.
LEASE_TTL = 30.0
HEARTBEAT_TIMEOUT = timedelta(seconds=2)


async def test_a_frozen_claimer_past_the_heartbeat_timeout_loses_the_attempt_and_its_late_payout(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, db: Pool, spawn: SpawnClaimer
) -> None:
    procs: dict[str, ServiceProcess] = {
        name: await spawn(name, lease_ttl_seconds=LEASE_TTL) for name in ("claimer-a", "claimer-b")
    }
    pay_after = float(await db.fetchval("SELECT extract(epoch FROM now())")) + 8.0
    policy = RetryPolicy(
        base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), heartbeat_timeout=HEARTBEAT_TIMEOUT
    )
    job = job_due(
        "merchant-silent",
        handler="chaos.heartbeat_payout",
        payload={"amount_cents": 500, "pay_after_epoch": pay_after},
        retry=policy,
    )
    ticker = await start_ticker(kafka, pg_dsn)  # keeps the retry's timer
    try:
        await publish(producer, kafka, [job])
        frozen_name = await owner_of_first_claim(db, job.run_id)
        frozen = procs[frozen_name]
        rival = next(name for name in procs if name != frozen_name)
        await assert_eventually(
            lambda: db.fetchval(
                "SELECT heartbeat_details IS NOT NULL FROM claimer.runs WHERE run_id = $1", job.run_id
            ),
            timeout=30,
        )
        frozen.signal(signal.SIGSTOP)
        frozen_at: datetime = await db.fetchval("SELECT now()")
        try:
            row = await wait_state(db, job.run_id, "completed", timeout=90)
            # Frozen past the payout instant too: woken, the handler would go straight to its write,
            # but its own overdue heartbeat deadline cancels it first.
            await assert_eventually(
                lambda: db.fetchval("SELECT extract(epoch FROM now()) > $1", pay_after + 0.2), timeout=30
            )
        finally:
            frozen.signal(signal.SIGCONT)
    finally:
        await stop_ticker(ticker)
    assert (row["attempt"], row["owner"], row["takeovers"], row["lease_lapses"]) == (2, rival, 0, 0)
    [failure] = [entry for entry in _history(row) if entry["event"] == "failed"]
    assert failure["error_type"] == "HeartbeatTimeout"
    assert f"claimer {frozen_name}" in failure["message"]
    # Failed by the heartbeat deadline (2 s, then the reaper's grace), long before the 30 s lease.
    assert datetime.fromisoformat(failure["finished_at"]) - frozen_at < timedelta(seconds=15)

    # Woken, the frozen claimer fails its attempt for silence too (its own deadline long past) and
    # submits that outcome under token 1: the fence refuses it.
    async def refused_outcomes() -> float:
        metrics = await frozen.metrics()
        return metrics.get("slotflow_claimer_fence_rejected_total{write=outcome}", 0.0)

    assert await assert_eventually(refused_outcomes, timeout=30, message="the late outcome refused") >= 1
    after = await wait_state(db, job.run_id, "completed")
    assert (after["fence_token"], after["owner"]) == (row["fence_token"], rival)
    assert json.loads(after["heartbeat_details"]) == {"stage": "authorized"}
    history = phases(await attempts(db, job.run_id))
    assert ("resumed", row["fence_token"], rival) in history
    assert [phase for phase in history if phase[2] == frozen_name] == [("start", 1, frozen_name)]
    paid = await ledger(db)
    assert [(p["run_id"], p["fence_token"], p["paid_by"]) for p in paid] == [
        (job.run_id, row["fence_token"], rival)
    ]


def _history(row: dict[str, object]) -> list[dict[str, str]]:
    raw = row["history"]
    return json.loads(raw) if isinstance(raw, str) else []
