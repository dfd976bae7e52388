"""The bare PostgreSQL queue: `FOR UPDATE SKIP LOCKED` claim, then complete. The ceiling for claiming
on this database, beside which slotflow's and every peer's job figures are read.

    .venv/bin/python bench/peers/bare.py jobs --size 20000 --pg-dsn DSN [--workers 2]

jobs: a table of its own in a scratch database; `--workers` processes each loop claiming up to
BATCH pending rows in one statement (`UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)`,
committed), doing nothing, and marking them done (a second commit). The driver inserts the N jobs in
chunks of CHUNK after the workers are connected. Latency per job: done (the database clock) minus the
moment its chunk's INSERT returned; throughput: N over the first INSERT to the last job done.

Nothing else is measured: the loop has no schedules, workflows, histories or orchestrator.
"""

import sys
from pathlib import Path

# Run as a script, bench/peers/ comes first on sys.path, where slotflow.py would stand in for the
# slotflow package: the bench directory goes there instead (peers.*, the bench's shared modules).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import asyncio
import multiprocessing
import time
import uuid
from datetime import UTC, datetime
from multiprocessing.synchronize import Event

import asyncpg
from _common import with_database

from peers.common import latency_metrics, not_measured, parse_args, result

SYSTEM = "bare"
#: Rows one claim takes at most: the slotflow adapter's claimers keep up to 256 runs in flight.
BATCH = 256
#: Rows per INSERT, each chunk's return being the enqueue instant of its jobs.
CHUNK = 1000
#: A worker finding the queue empty waits this long before asking again (no LISTEN/NOTIFY: the
#: bare loop is the claim and nothing else).
IDLE_SLEEP_S = 0.005

SCHEMA = """
CREATE TABLE jobs (
    id          bigint      PRIMARY KEY,
    state       text        NOT NULL DEFAULT 'pending',
    finished_at timestamptz
);
CREATE INDEX jobs_pending ON jobs (id) WHERE state = 'pending';
"""
CLAIM = """
UPDATE jobs SET state = 'running'
 WHERE id IN (SELECT id FROM jobs WHERE state = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""
COMPLETE = "UPDATE jobs SET state = 'done', finished_at = clock_timestamp() WHERE id = ANY($1::bigint[])"
ENQUEUE = "INSERT INTO jobs (id) SELECT generate_series($1::bigint, $2::bigint)"


async def work(dsn: str, ready: Event) -> None:
    conn = await asyncpg.connect(dsn)
    ready.set()
    try:
        while True:
            claimed = [row["id"] for row in await conn.fetch(CLAIM, BATCH)]
            if not claimed:
                await asyncio.sleep(IDLE_SLEEP_S)
                continue
            await conn.execute(COMPLETE, claimed)
    finally:
        await conn.close()


def worker_process(dsn: str, ready: Event) -> None:
    asyncio.run(work(dsn, ready))


async def jobs(dsn: str, count: int, workers: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    readies = [context.Event() for _ in range(workers)]
    processes = [context.Process(target=worker_process, args=(dsn, ready), daemon=True) for ready in readies]
    for process in processes:
        process.start()
    conn = await asyncpg.connect(dsn)
    try:
        for ready in readies:
            if not await asyncio.to_thread(ready.wait, 60):
                raise SystemExit("a bare worker did not connect in 60 s")
        enqueued: list[datetime] = []
        started = datetime.now(UTC)
        for first in range(1, count + 1, CHUNK):
            last = min(count, first + CHUNK - 1)
            await conn.execute(ENQUEUE, first, last)
            enqueued.append(datetime.now(UTC))
        deadline = time.monotonic() + max(600.0, count / 50)
        while await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'done'") < count:
            if time.monotonic() > deadline:
                raise SystemExit("the bare loop did not finish in time")
            if not all(process.is_alive() for process in processes):
                raise SystemExit("a bare worker died")
            await asyncio.sleep(0.05)
        rows = await conn.fetch("SELECT id, finished_at FROM jobs")
    finally:
        await conn.close()
        for process in processes:
            process.terminate()
            process.join(10)
    latencies = [(r["finished_at"] - enqueued[(r["id"] - 1) // CHUNK]).total_seconds() for r in rows]
    last_done = max(r["finished_at"] for r in rows)
    return latency_metrics(latencies, count, (last_done - started).total_seconds())


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if args.workload != "jobs":
        print(not_measured(SYSTEM, args.workload, "the bare loop is a job queue only (claim, complete)"))
        return
    name = f"bench_bare_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(args.pg_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = with_database(args.pg_dsn, name)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(SCHEMA)
        finally:
            await conn.close()
        metrics = await jobs(dsn, args.size, args.workers)
    finally:
        admin = await asyncpg.connect(args.pg_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    notes = (
        f"{args.workers} worker processes, claims of up to {BATCH} rows (one statement, committed), "
        f"then one UPDATE marking them done; enqueued by INSERTs of {CHUNK}"
    )
    print(result(SYSTEM, "jobs", args.size, metrics, notes))


if __name__ == "__main__":
    asyncio.run(main())
