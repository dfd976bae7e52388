"""A claimer that froze past its leases (stopped, or starved of CPU) was not killed by its run.

A lease lapses when its claimer dies, freezes or cannot reach the database. A handler that kills
its process, or blocks its loop, says something about the run: it takes down every claimer in turn
and is quarantined after MAX_LEASE_LAPSES. A process that stood still through no handler's doing
says nothing. In the sixth hour-long fault run (2026-12-07) a claimer that got no CPU for 5 s on
a busy machine lost a healthy payout's lease to itself twice and once to another claimer, and the
run was quarantined: its slot never paid. Here each of two claimers is stopped in turn, past the
lease, while it holds the run mid-handler; with a bound of two lapses, the run must still complete,
paid once, with both lapses excused by the claimer that froze.
"""

import functools
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ProcessGroup, ServiceProcess
from tests.chaos.claimer.procs import claimer_process
from tests.integration.claimer.support import job_due, ledger, publish, run_row, wait_state

LEASE_TTL = 2.0


async def _row_where(
    db: Pool, run_id: str, what: str, test: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The run's row once ``test`` holds of it."""

    async def probe() -> dict[str, Any] | None:
        row = await run_row(db, run_id)
        return row if row is not None and test(row) else None

    return await assert_eventually(probe, timeout=60, message=f"{run_id}: {what}")


def _token_at_least(row: dict[str, Any], *, token: int) -> bool:
    return int(row["fence_token"]) >= token


def _excused(row: dict[str, Any], *, token: int) -> bool:
    return token in row["excused_tokens"]


async def test_leases_lost_by_a_frozen_claimer_do_not_quarantine_the_run(
    kafka: KafkaSettings, producer: Producer, db: Pool, pg_dsn: str, tmp_path: Path, processes: ProcessGroup
) -> None:
    claimers: dict[str, ServiceProcess] = {}
    for name in ("claimer-a", "claimer-b"):
        claimers[name] = await processes.start(
            claimer_process(name, kafka, pg_dsn, tmp_path, lease_ttl_seconds=LEASE_TTL, max_lease_lapses=2)
        )
    hold_until = float(await db.fetchval("SELECT extract(epoch FROM now())")) + 40.0
    job = job_due(
        "merchant-frozen",
        handler="chaos.payout",
        payload={"amount_cents": 700, "hold_until_epoch": hold_until},
    )
    await publish(producer, kafka, [job])
    row = await _row_where(
        db, job.run_id, "claimed", lambda r: r["fence_token"] >= 1 and r["state"] == "running"
    )

    for token in (2, 3):
        holder = claimers[str(row["owner"])]
        holder.signal(signal.SIGSTOP)  # frozen mid-handler, past its lease
        try:
            row = await _row_where(
                db,
                job.run_id,
                f"taken over to token {token}",
                functools.partial(_token_at_least, token=token),
            )
        finally:
            holder.signal(signal.SIGCONT)
        # Thawed, the frozen claimer finds the run lost and takes back the lapse the takeover
        # counted, before the other one freezes in its turn.
        await _row_where(
            db,
            job.run_id,
            f"token {token - 1} excused",
            functools.partial(_excused, token=token - 1),
        )
        assert row["state"] == "running", row  # before the fix, the second takeover quarantined it

    row = await wait_state(db, job.run_id, "completed", timeout=90)
    assert all(claimer.alive() for claimer in claimers.values())
    assert row["lease_lapses"] == 0, {
        k: row[k] for k in ("lease_lapses", "excused_tokens", "takeovers", "history")
    }
    assert sorted(row["excused_tokens"]) == [1, 2]
    assert row["takeovers"] == 2
    assert [(p["run_id"], p["fence_token"], p["amount_cents"]) for p in await ledger(db)] == [
        (job.run_id, 3, 700)
    ]
