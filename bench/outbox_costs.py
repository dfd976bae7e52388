"""What the transactional outbox costs PostgreSQL per event, and what two other designs would.

The claimer stages two events per run (RunStarted, RunCompleted) and its relay marks them
published. This measures that cost alone, in PostgreSQL's backends, for three designs, on a
scratch database with the library's own outbox table:

- ``rows``: a row per event, staged by `append_encoded` in transactions of ``--per-transaction``
  events, published by the relay's own `PICK_AND_MARK` (rows marked, kept for the purge);
- ``delete``: the same rows, taken by `PICK_AND_MARK`'s pick with a ``DELETE ... RETURNING``
  instead of the mark (nothing kept after publication, so no purge later);
- ``grouped``: a row per topic and shard of each transaction, staged by `append_grouped`,
  published by `PICK_AND_MARK` (what the claimer does since grouped rows).

The relay takes a pass after every few staging transactions, as the claimer's relay does when woken.
CPU is user + system time of the two backends (the staging one and the relay's), from /proc;
WAL bytes from `pg_current_wal_lsn()`; table bytes from `pg_total_relation_size` after the run.
The arms alternate run by run; the table gives medians. Linux only (reads /proc).

    .venv/bin/python bench/outbox_costs.py --runs 5 --events 40000 --per-transaction 64
"""

import argparse
import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
from _common import fingerprint, median, process_cpu_seconds, scratch_database
from pydantic_core import to_json

from slotflow.pg.migrations import OUTBOX, apply_migrations
from slotflow.pg.outbox import SHARDS, Encoded, append_encoded, append_grouped, headers_json
from slotflow.pg.pool import create_pool
from slotflow.pg.statements import sql
from slotflow.relay import PICK_AND_MARK
from slotflow.settings import PostgresSettings

SCHEMA = "bench_outbox"
ARMS = ("rows", "delete", "grouped")
RELAY_EVERY = 4  # staging transactions between relay passes
RELAY_BATCH = 1000  # rows per shard per pass, the relay's default

#: The `delete` arm's relay: the relay's own `PICK_AND_MARK`, taking the rows instead of marking them.
PICK_AND_DELETE = PICK_AND_MARK.replace(
    "UPDATE {schema}.outbox AS o SET published_at = now()", "DELETE FROM {schema}.outbox AS o"
)
assert PICK_AND_DELETE != PICK_AND_MARK, "PICK_AND_MARK no longer starts as this benchmark expects"

TOPIC = "slotflow.runs.events.v1"
HEADERS = headers_json("RunStarted", 1)


@dataclass
class Result:
    arm: str
    events: int
    staging_cpu_us: float
    relay_cpu_us: float
    wal_bytes: float
    table_bytes: float
    wall_us: float

    @property
    def cpu_us(self) -> float:
        return self.staging_cpu_us + self.relay_cpu_us


def _event(n: int, at: datetime) -> Encoded:
    # A RunStarted of the claimer's shape and size (slotflow_claimer.events.RunEvents.started_row).
    job_id = f"bench-job-{n:07d}"
    run_id = f"{job_id}@2026-12-06T17:00:00Z"
    value = to_json(
        {
            "type": "RunStarted",
            "version": 1,
            "id": f"{run_id}/1/started",
            "key": job_id,
            "occurred_at": at,
            "source": "claimer",
            "data": {
                "run_id": run_id,
                "job_id": job_id,
                "slot": "2026-12-06T17:00:00Z",
                "attempt": 1,
                "fence_token": 1,
                "owner": "claimer-bench",
                "workflow_id": None,
                "sequence": None,
                "started_at": at,
            },
        }
    )
    return Encoded(TOPIC, f"{run_id}/1/started/{uuid.uuid4().hex[:8]}", job_id, value, HEADERS)


async def _relay(conn: asyncpg.Connection, arm: str) -> int:
    statement = PICK_AND_DELETE if arm == "delete" else PICK_AND_MARK
    async with conn.transaction():
        rows = await conn.fetch(sql(statement, SCHEMA), list(range(SHARDS)), RELAY_BATCH)
    # What the relay would send: every event of every row, in seq order.
    rows.sort(key=lambda r: r["seq"])
    return sum(1 if r["event_ids"] is None else len(r["event_ids"]) for r in rows)


async def run_arm(arm: str, events: int, per_transaction: int) -> Result:
    async with scratch_database() as dsn:
        pool = await create_pool(PostgresSettings(dsn=dsn), min_size=1, max_size=2)
        try:
            await apply_migrations(pool, schema=SCHEMA, sources=[OUTBOX])
        finally:
            await pool.close()
        stager = await asyncpg.connect(dsn)
        relay = await asyncpg.connect(dsn)
        try:
            at = datetime.now(UTC)
            batches = [
                [_event(n, at) for n in range(start, min(events, start + per_transaction))]
                for start in range(0, events, per_transaction)
            ]
            stager_pid = await stager.fetchval("SELECT pg_backend_pid()")
            relay_pid = await relay.fetchval("SELECT pg_backend_pid()")
            wal0 = await stager.fetchval("SELECT pg_current_wal_lsn()")
            cpu_s, cpu_r, t0 = (
                process_cpu_seconds(stager_pid),
                process_cpu_seconds(relay_pid),
                time.perf_counter(),
            )
            relayed = 0
            for i, batch in enumerate(batches):
                async with stager.transaction():
                    if arm == "grouped":
                        await append_grouped(stager, schema=SCHEMA, rows=batch)
                    else:
                        await append_encoded(stager, schema=SCHEMA, rows=batch)
                if i % RELAY_EVERY == RELAY_EVERY - 1:
                    relayed += await _relay(relay, arm)
            while moved := await _relay(relay, arm):
                relayed += moved
            wall = time.perf_counter() - t0
            staging_cpu = process_cpu_seconds(stager_pid) - cpu_s
            relay_cpu = process_cpu_seconds(relay_pid) - cpu_r
            wal = await stager.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", wal0)
            size = await stager.fetchval("SELECT pg_total_relation_size($1::regclass)", f"{SCHEMA}.outbox")
            if relayed != events:
                raise SystemExit(f"{arm}: relayed {relayed} of {events} events")
            return Result(
                arm,
                events,
                staging_cpu_us=staging_cpu / events * 1e6,
                relay_cpu_us=relay_cpu / events * 1e6,
                wal_bytes=float(wal) / events,
                table_bytes=float(size) / events,
                wall_us=wall / events * 1e6,
            )
        finally:
            await stager.close()
            await relay.close()


def _median(results: list[Result], field: str) -> float:
    return median([getattr(r, field) for r in results])


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--per-transaction", type=int, default=64)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"a subset of {','.join(ARMS)}")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        parser.error(f"unknown arm(s): {', '.join(sorted(unknown))}")
    print(json.dumps(fingerprint()))
    results: dict[str, list[Result]] = {arm: [] for arm in arms}
    for run in range(args.runs):
        for arm in arms[run % len(arms) :] + arms[: run % len(arms)]:  # the order rotates every run
            result = await run_arm(arm, args.events, args.per_transaction)
            results[arm].append(result)
            print(
                f"run {run + 1} {arm:8} CPU {result.cpu_us:5.1f} us/event "
                f"(staging {result.staging_cpu_us:5.1f}, relay {result.relay_cpu_us:5.1f}), "
                f"WAL {result.wal_bytes:6.0f} B/event, table {result.table_bytes:5.0f} B/event, "
                f"wall {result.wall_us:5.1f} us/event, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    base = results.get("rows")
    print(f"\nmedians of {args.runs}, {args.events} events, {args.per_transaction} a transaction:\n")
    print(
        "| design | PostgreSQL CPU µs/event | of it staging | of it relay | WAL bytes/event | table bytes/event | wall µs/event | CPU against `rows` |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for arm, arm_results in results.items():
        cpu = _median(arm_results, "cpu_us")
        ratio = f"{cpu / _median(base, 'cpu_us'):.2f}" if base else "—"
        print(
            f"| `{arm}` | {cpu:.1f} | {_median(arm_results, 'staging_cpu_us'):.1f} | "
            f"{_median(arm_results, 'relay_cpu_us'):.1f} | {_median(arm_results, 'wal_bytes'):,.0f} | "
            f"{_median(arm_results, 'table_bytes'):,.0f} | {_median(arm_results, 'wall_us'):.1f} | {ratio} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
