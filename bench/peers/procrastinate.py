"""procrastinate as a peer: PostgreSQL job queue with periodic tasks (runs in the peers virtualenv).

    python bench/peers/procrastinate.py jobs|schedules|workflows|replay|recovery --size N --pg-dsn DSN [--workers 2]

jobs: N no-op tasks deferred (batch_defer_async, 500 a statement) to a scratch database while two
worker processes (App.run_worker_async, LISTEN/NOTIFY on, `--concurrency` jobs each) run them.
Latency is procrastinate's own event timestamps (procrastinate_events: 'deferred' to 'succeeded',
both the server's now()); runs/s is N over first deferred to last succeeded.

schedules: N periodic tasks (one task, N periodic ids) on `* * * * *` registered in both workers.
Both workers run procrastinate's periodic deferrer; the database keeps one job per periodic id and
minute. The first whole minute after both workers are up is measured: lateness is each job's
'started' event minus that minute (periodic jobs carry their own scheduled timestamp).

workflows, replay, recovery: procrastinate has no workflows, history or replay; a job whose worker
is killed stays 'doing' until the application retries stalled jobs itself, which is not the
recovery of open workflows the contract measures, so those are not measured.
"""

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# This file is named after the package it drives: drop its own folder from the import path so
# `import procrastinate` finds the package, and reach the shared module through bench/.
HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from peers.pg_peer_common import (
    adapter_arguments,
    check_workers_alive,
    emit,
    latency_metrics,
    measured,
    next_minute_boundary,
    not_measured,
    rate,
    scratch_database,
    spawn_worker,
    stop_workers,
    wait_until,
)

SYSTEM = "procrastinate"
QUEUE = "bench"
ONE_MINUTE = "* * * * *"
DEFER_BATCH = 500
# Slots are read once every one of them has started, or after this long past their minute.
SCHEDULE_GRACE_SECONDS = 240.0


def build_app(dsn: str, periodic_count: int) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    async def noop() -> None:
        return None

    async def tick(timestamp: int) -> None:
        return None

    # Decorators applied as calls: in the project's environment procrastinate is untyped.
    app.task(name="noop", queue=QUEUE)(noop)
    tick_task = app.task(name="tick", queue=QUEUE)(tick)
    for index in range(periodic_count):
        app.periodic(cron=ONE_MINUTE, periodic_id=f"slot{index}")(tick_task)
    return app


def run_worker(dsn: str, name: str, concurrency: int, periodic_count: int) -> None:
    """One worker process: runs jobs (and, with periodic tasks, the deferrer) until SIGTERM."""
    app = build_app(dsn, periodic_count)

    async def work() -> None:
        async with app.open_async():
            await app.run_worker_async(
                name=name, queues=[QUEUE], concurrency=concurrency, wait=True, delete_jobs="never"
            )

    asyncio.run(work())


def query(dsn: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def count(dsn: str, sql: str, params: tuple[object, ...] = ()) -> int:
    value = query(dsn, sql, params)[0][0]
    assert isinstance(value, int)
    return value


def earlier_deferrals(dsn: str, slot: float, size: int) -> str:
    """What the deferrers did instead: the minutes before the measured one (each deferrer catches
    up the minute just past as it starts) and how fast, from procrastinate's own event times."""
    (deferred, first, last) = query(
        dsn,
        """
        SELECT count(*), extract(epoch FROM min(e.at))::float8, extract(epoch FROM max(e.at))::float8
        FROM procrastinate_periodic_defers p
        JOIN procrastinate_events e ON e.job_id = p.job_id AND e.type = 'deferred'
        WHERE p.defer_timestamp < %s
        """,
        (slot,),
    )[0]
    if not deferred:
        return ""
    per_second = deferred / max(last - first, 1e-3)
    return (
        f"; meanwhile {deferred} of the minute before were deferred (the catch-up each deferrer makes "
        f"as it starts) at {per_second:.0f}/s, at which one minute's {size} take about "
        f"{size / per_second / 60:.0f} min"
    )


def start_workers(
    dsn: str, workers: int, concurrency: int, periodic_count: int
) -> list[subprocess.Popen[bytes]]:
    script = Path(__file__).resolve()
    processes = [
        spawn_worker(script, [dsn, f"worker{index}", str(concurrency), str(periodic_count)])
        for index in range(workers)
    ]
    try:
        # A worker registers its row in procrastinate_workers as it starts to fetch jobs.
        wait_until(
            lambda: check_alive_and_count(dsn, processes) >= workers,
            timeout=120,
            what=f"{workers} workers up",
        )
    except BaseException:
        stop_workers(processes)
        raise
    return processes


def check_alive_and_count(dsn: str, processes: list[subprocess.Popen[bytes]]) -> int:
    check_workers_alive(processes)
    return count(dsn, "SELECT count(*) FROM procrastinate_workers")


def succeeded_while_alive(dsn: str, processes: list[subprocess.Popen[bytes]]) -> int:
    """Jobs succeeded so far; raises if a worker died, rather than waiting out the timeout."""
    check_workers_alive(processes)
    return count(dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")


def apply_schema(dsn: str) -> None:
    app = build_app(dsn, 0)

    async def apply() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(apply())


def jobs(dsn: str, size: int, workers: int, concurrency: int, timeout: float) -> dict[str, object]:
    apply_schema(dsn)
    processes = start_workers(dsn, workers, concurrency, 0)
    try:
        app = build_app(dsn, 0)

        async def defer_all() -> None:
            async with app.open_async():
                noop = app.tasks["noop"]
                for start in range(0, size, DEFER_BATCH):
                    await noop.batch_defer_async(*({} for _ in range(min(DEFER_BATCH, size - start))))

        asyncio.run(defer_all())
        wait_until(
            lambda: succeeded_while_alive(dsn, processes) >= size,
            timeout=timeout,
            what=f"{size} jobs succeeded",
            interval=0.2,
        )
    finally:
        stop_workers(processes)
    rows = query(
        dsn,
        """
        SELECT extract(epoch FROM d.at)::float8, extract(epoch FROM s.at)::float8
        FROM procrastinate_events d JOIN procrastinate_events s USING (job_id)
        WHERE d.type = 'deferred' AND s.type = 'succeeded'
        """,
    )
    deferred = [float(row[0]) for row in rows]
    succeeded = [float(row[1]) for row in rows]
    latencies = [(done - enqueued) * 1000 for enqueued, done in zip(deferred, succeeded, strict=True)]
    metrics: dict[str, object] = {"per_second": rate(len(rows), min(deferred), max(succeeded))}
    metrics.update(latency_metrics(latencies))
    return measured(
        SYSTEM,
        "jobs",
        size,
        metrics,
        f"{workers} worker processes x concurrency {concurrency}, LISTEN/NOTIFY on; deferred with "
        f"batch_defer_async ({DEFER_BATCH} a statement); latency from procrastinate_events "
        "'deferred' to 'succeeded' (server clock)",
    )


def schedules(dsn: str, size: int, workers: int, concurrency: int) -> dict[str, object]:
    apply_schema(dsn)
    processes = start_workers(dsn, workers, concurrency, size)
    try:
        # On start each deferrer catches up the minute just past; that burst is not measured.
        slot = next_minute_boundary(time.time() + 1)
        deadline = slot + SCHEDULE_GRACE_SECONDS
        started_sql = """
            SELECT count(*) FROM procrastinate_periodic_defers p
            JOIN procrastinate_events e ON e.job_id = p.job_id AND e.type = 'started'
            WHERE p.defer_timestamp = %s
        """
        while time.time() < deadline:
            check_workers_alive(processes)
            if time.time() > slot and count(dsn, started_sql, (slot,)) >= size:
                break
            time.sleep(0.5)
    finally:
        stop_workers(processes)
    rows = query(
        dsn,
        """
        SELECT extract(epoch FROM e.at)::float8 FROM procrastinate_periodic_defers p
        JOIN procrastinate_events e ON e.job_id = p.job_id AND e.type = 'started'
        WHERE p.defer_timestamp = %s
        """,
        (slot,),
    )
    starts = [float(row[0]) for row in rows]
    if len(starts) < size:
        deferred = count(
            dsn, "SELECT count(*) FROM procrastinate_periodic_defers WHERE defer_timestamp = %s", (slot,)
        )
        return not_measured(
            SYSTEM,
            "schedules",
            f"of {size} periodic tasks on a one-minute cron, {deferred} were deferred and {len(starts)} "
            f"started within {SCHEDULE_GRACE_SECONDS:.0f} s of their minute ({workers} workers each running "
            "the periodic deferrer, which inserts one job per task and minute, one statement at a time)"
            + earlier_deferrals(dsn, slot, size),
        )
    lateness = [(start - slot) * 1000 for start in starts]
    metrics: dict[str, object] = {"slots_per_second": rate(size, slot, max(starts))}
    metrics.update(latency_metrics(lateness, prefix="lateness_"))
    return measured(
        SYSTEM,
        "schedules",
        size,
        metrics,
        f"{size} periodic ids of one task on '{ONE_MINUTE}', {workers} workers each running the periodic "
        "deferrer (one job per id and minute, deduplicated by the database); lateness = 'started' event "
        "minus the minute; slots_per_second = size / (last start - minute). Fires on seconds: yes (an "
        "optional 6th cron field). Time zones: no (crons are evaluated in UTC; no time zone option).",
    )


UNSUPPORTED = {
    "workflows": "procrastinate is a job queue: it has no workflows (no steps, no durable timers)",
    "replay": "procrastinate has no workflow history and no replayer",
    "recovery": "procrastinate has no open workflows to recover; a SIGKILLed worker's jobs stay 'doing': "
    "workers whose heartbeat is older than stalled_worker_timeout (30 s) are pruned, but their jobs are "
    "retried only by the application (JobManager.get_stalled_jobs + retry, typically a periodic task)",
}


def main(argv: list[str]) -> None:
    if argv[:1] == ["_worker"]:
        dsn, name, concurrency, periodic_count = argv[1:5]
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        run_worker(dsn, name, int(concurrency), int(periodic_count))
        return
    args = adapter_arguments(SYSTEM, argv)
    if args.workload in UNSUPPORTED:
        emit(not_measured(SYSTEM, args.workload, UNSUPPORTED[args.workload]))
        return
    with scratch_database(args.pg_dsn) as dsn:
        if args.workload == "jobs":
            result = jobs(dsn, args.size, args.workers, args.concurrency, args.timeout)
        else:
            result = schedules(dsn, args.size, args.workers, args.concurrency)
    emit(result)


if __name__ == "__main__":
    main(sys.argv[1:])
