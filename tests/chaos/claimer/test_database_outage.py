"""A claimer that loses the database mid-run was not killed by its run: no quarantine for that.

A lease lapses when its claimer dies, freezes or cannot reach the database. The first two say
something about the run (a handler that kills or freezes its process takes down every claimer in
turn, and the run is quarantined after MAX_LEASE_LAPSES); the third does not. In the hour-long
fault run three database restarts within 30 s lapsed the 3 s leases of 53 healthy scheduled runs
three times each, and each was quarantined: dead-lettered, its slot never paid. Here a claimer's
only way to PostgreSQL is a forwarder the test cuts twice, each time past the lease; the run,
held mid-handler throughout, must still complete, paid once, with both lapses excused.
"""

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ProcessGroup
from tests.chaos.claimer.procs import claimer_process
from tests.chaos.system.proxy import FaultyProxy
from tests.integration.claimer.support import job_due, ledger, publish, run_row, wait_state

LEASE_TTL = 2.0
OUTAGE_S = 3 * LEASE_TTL


def _through(dsn: str, port: int) -> tuple[str, str, int]:
    """``dsn`` pointed at 127.0.0.1:``port``, and the host and port it pointed at."""
    parts = urlsplit(dsn)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc)), parts.hostname or "127.0.0.1", parts.port or 5432


async def _fence_token_reaches(db: Pool, run_id: str, token: int) -> None:
    async def probe() -> bool:
        row = await run_row(db, run_id)
        return row is not None and row["fence_token"] >= token

    await assert_eventually(probe, timeout=60, message=f"{run_id} taken over to token {token}")


async def test_leases_lost_to_database_outages_do_not_quarantine_the_run(
    kafka: KafkaSettings, producer: Producer, db: Pool, pg_dsn: str, tmp_path: Path, processes: ProcessGroup
) -> None:
    _, host, port = _through(pg_dsn, 0)
    proxy = FaultyProxy("postgres", host, port)
    proxy_port = await proxy.start()
    cut_off_dsn, _, _ = _through(pg_dsn, proxy_port)
    try:
        claimer = await processes.start(
            claimer_process(
                "claimer-a",
                kafka,
                cut_off_dsn,
                tmp_path,
                lease_ttl_seconds=LEASE_TTL,
                max_lease_lapses=2,
                # The handler's own writes go straight to the database: only the claimer's
                # bookkeeping (heartbeats, claims, outcomes) loses it.
                handler_dsn=pg_dsn,
            )
        )
        hold_until = float(await db.fetchval("SELECT extract(epoch FROM now())")) + 30.0
        job = job_due(
            "merchant-outage",
            handler="chaos.payout",
            payload={"amount_cents": 500, "hold_until_epoch": hold_until},
        )
        await publish(producer, kafka, [job])
        await _fence_token_reaches(db, job.run_id, 1)

        for token in (2, 3):
            # The database goes away for longer than the lease, then comes back at the same address.
            await proxy.close()
            await asyncio.sleep(OUTAGE_S)
            await proxy.start(proxy_port)
            await _fence_token_reaches(db, job.run_id, token)

        row = await wait_state(db, job.run_id, "completed", timeout=90)
        assert claimer.alive()
        # Two lapses, both while the claimer was alive and cut off: both excused, so the bound of
        # two never quarantined the run (before, the second takeover dead-lettered it).
        assert row["lease_lapses"] == 0, {
            k: row[k] for k in ("lease_lapses", "excused_tokens", "takeovers", "history", "fence_token")
        }
        assert sorted(row["excused_tokens"]) == [1, 2]
        assert row["takeovers"] == 2
        assert json.loads(row["error"] or "null") is None
        assert [(p["run_id"], p["fence_token"], p["amount_cents"]) for p in await ledger(db)] == [
            (job.run_id, 3, 500)
        ]
    finally:
        await proxy.close()
