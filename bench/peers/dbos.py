"""DBOS Transact as a peer: durable workflows, queues and schedules in PostgreSQL (peers virtualenv).

    python bench/peers/dbos.py jobs|schedules|workflows|replay|recovery --size N --pg-dsn DSN [--workers 2]

Every workload gets a scratch database as DBOS's system database. Worker processes (this file run
again as `_worker`, each with its own executor id, all on one queue: DBOS queues are shared through
the system database by every process that listens to them) launch DBOS, register the queue
`bench` (worker_concurrency = `--concurrency`, polled every 0.1 s instead of DBOS's default 1 s)
and run what is enqueued. This process enqueues with a DBOSClient, in transactions of 500
(enqueue_in_transaction), and reads DBOS's own timestamps from dbos.workflow_status afterwards.

jobs: a workflow whose body is one no-op step (DBOS queues hold workflows, not bare steps).
    Latency = completed_at - created_at; runs/s = N over first created to last completed.
workflows: two no-op steps with DBOS.sleep(0) between; same measurements.
schedules: N schedules (DBOS.apply_schedules) on the one-minute cron, run on the queue. Lateness is
    the run's dequeue time (started_at_epoch_ms) minus its scheduled minute. The measured minute is
    the first whole one at least a minute after the schedules are live, so the scheduler's wait
    before it is a full period, as in steady operation (its jitter grows with the wait).
recovery: one worker runs N open workflows (a step, then a durable sleep until a common instant);
    once every one is inside its sleep the worker is SIGKILLed; after the instant passes the worker
    is started again with the same executor id, and DBOS's launch recovers its pending workflows.
    seconds_to_progress = restart until all N have finished their second step.
replay: not measured: DBOS has no replayer (recovery re-executes a workflow, skipping recorded steps).
"""

import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# This file is named after the package it drives: drop its own folder from the import path so
# `import dbos` finds the package, and reach the shared module through bench/.
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

SYSTEM = "dbos"
QUEUE = "bench"
APP_NAME = "slotflow-bench"
# One version for every process and restart: DBOS only runs and recovers workflows of its own version.
APP_VERSION = "bench"
QUEUE_POLL_SECONDS = 0.1
ENQUEUE_BATCH = 500
ONE_MINUTE = "0 * * * * *"  # DBOS crons put seconds first
SCHEDULE_GRACE_SECONDS = 240.0
# DBOS runs one OS thread per schedule in every process; from this many on the run is not tried:
# at 10,000 on the 2-core development machine the two workers' 20,000 threads took the load
# average to about 1,000 within two minutes and their system-database connections timed out.
TOO_MANY_SCHEDULES = 10000
# DBOS.sleep(0) returns at once and records nothing (no durable timer); the shortest that is
# checkpointed like any other sleep is any positive length.
SHORTEST_SLEEP = 0.001


def sqlalchemy_url(dsn: str) -> str:
    """``dsn`` for SQLAlchemy with psycopg 3, the driver DBOS itself uses for PostgreSQL."""
    scheme, rest = dsn.split("://", 1)
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL DSN: {scheme}://...")
    return f"postgresql+psycopg://{rest}"


def scheduled_workflow_suffix(slot: int) -> str:
    """How DBOS ends the id of the run a schedule fires for ``slot`` (`sched-<name>-<iso time>`)."""
    return "-" + datetime.fromtimestamp(slot, UTC).isoformat()


def register_workflows() -> Any:
    """Registers every workflow the workloads use under fixed names (before launch); returns the
    scheduled one. Decorators are applied as calls: in the project's environment DBOS is untyped."""
    from dbos import DBOS

    async def noop() -> None:
        return None

    async def seconds_until(instant: float) -> float:
        return max(SHORTEST_SLEEP, instant - time.time())

    noop_step = DBOS.step(name="noop_step")(noop)
    seconds_until_step = DBOS.step(name="seconds_until")(seconds_until)

    async def noop_job() -> None:
        await noop_step()

    async def two_step_flow() -> None:
        await noop_step()
        await DBOS.sleep_async(SHORTEST_SLEEP)
        await noop_step()

    async def sleep_until_flow(wake_at: float) -> None:
        await noop_step()
        # The length is a step's output so a recovered run replays the same sleep, whose recorded
        # wake-up instant has passed by then: it goes straight on to the second step.
        await DBOS.sleep_async(await seconds_until_step(wake_at))
        await noop_step()

    async def tick(scheduled_at: datetime, context: Any) -> None:
        return None

    for name, body in (
        ("noop_job", noop_job),
        ("two_step_flow", two_step_flow),
        ("sleep_until_flow", sleep_until_flow),
    ):
        DBOS.workflow(name=name)(body)
    return DBOS.workflow(name="tick")(tick)


def run_worker(dsn: str, executor_id: str, concurrency: int, ready_file: str, schedule_count: int) -> None:
    """One DBOS process: launches, registers the queue (and schedules), works until SIGTERM."""
    from dbos import DBOS

    DBOS(
        config={
            "name": APP_NAME,
            "system_database_url": dsn,
            "executor_id": executor_id,
            "application_version": APP_VERSION,
            "log_level": "WARNING",
            # New schedules are noticed within a second rather than DBOS's default 30 s.
            "scheduler_polling_interval_sec": 1.0,
        }
    )
    tick = register_workflows()
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=concurrency or None, polling_interval_sec=QUEUE_POLL_SECONDS
    )
    if schedule_count:
        DBOS.apply_schedules(
            [
                {
                    "schedule_name": f"slot{index}",
                    "workflow_fn": tick,
                    "schedule": ONE_MINUTE,
                    "queue_name": QUEUE,
                }
                for index in range(schedule_count)
            ]
        )
    Path(ready_file).touch()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stopped.wait()
    DBOS.destroy(workflow_completion_timeout_sec=0)


class Workers:
    """The worker processes of one run, each started only after the one before it is ready.

    Starting them one after the other keeps two launches from migrating the fresh system database
    at the same time.
    """

    def __init__(self, dsn: str, ready_dir: Path) -> None:
        self.dsn = dsn
        self.ready_dir = ready_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, executor_id: str, concurrency: int, schedule_count: int = 0) -> float:
        """Starts one worker; the seconds it took to be ready."""
        ready = self.ready_dir / f"{executor_id}.ready"
        ready.unlink(missing_ok=True)
        began = time.monotonic()
        process = spawn_worker(
            Path(__file__).resolve(),
            [self.dsn, executor_id, str(concurrency), str(ready), str(schedule_count)],
        )
        self.processes.append(process)
        wait_until(lambda: self.alive() and ready.exists(), timeout=300, what=f"worker {executor_id} ready")
        return time.monotonic() - began

    def alive(self) -> bool:
        check_workers_alive([p for p in self.processes if p.returncode is None])
        return True

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()

    def stop(self) -> None:
        stop_workers([p for p in self.processes if p.returncode is None])


def query(dsn: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def count(dsn: str, sql: str, params: tuple[object, ...] = ()) -> int:
    value = query(dsn, sql, params)[0][0]
    assert isinstance(value, int)
    return value


def enqueue(dsn: str, workflow_name: str, size: int, *args: object) -> None:
    """``size`` runs of ``workflow_name`` on the queue, ENQUEUE_BATCH per transaction."""
    import sqlalchemy
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=dsn)
    engine = sqlalchemy.create_engine(sqlalchemy_url(dsn))
    options = {"queue_name": QUEUE, "workflow_name": workflow_name, "app_version": APP_VERSION}
    try:
        for start in range(0, size, ENQUEUE_BATCH):
            with engine.begin() as conn:
                for _ in range(min(ENQUEUE_BATCH, size - start)):
                    client.enqueue_in_transaction(conn, options, *args)
    finally:
        engine.dispose()
        client.destroy()


def succeeded(dsn: str, workflow_name: str) -> int:
    """How many runs of ``workflow_name`` succeeded; raises as soon as one has failed."""
    rows = query(
        dsn,
        "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FILTER (WHERE status = 'ERROR'), "
        "min(error) FROM dbos.workflow_status WHERE name = %s",
        (workflow_name,),
    )
    done, failed, error = rows[0]
    if failed:
        raise RuntimeError(f"{failed} runs of {workflow_name} failed, e.g. {error}")
    return int(done)


def queued_runs(
    dsn: str,
    ready_dir: Path,
    workflow_name: str,
    workload: str,
    size: int,
    workers: int,
    concurrency: int,
    timeout: float,
) -> dict[str, object]:
    pool = Workers(dsn, ready_dir)
    try:
        for index in range(workers):
            pool.start(f"worker{index}", concurrency)
        enqueue(dsn, workflow_name, size)
        wait_until(
            lambda: pool.alive() and succeeded(dsn, workflow_name) >= size,
            timeout=timeout,
            what=f"{size} {workflow_name} runs finished",
            interval=0.2,
        )
    finally:
        pool.stop()
    rows = query(
        dsn, "SELECT created_at, completed_at FROM dbos.workflow_status WHERE name = %s", (workflow_name,)
    )
    # Shows that the queue was shared: how many runs each worker process took.
    shares = query(
        dsn,
        "SELECT executor_id, count(*) FROM dbos.workflow_status WHERE name = %s GROUP BY 1 ORDER BY 1",
        (workflow_name,),
    )
    created = [int(row[0]) / 1000 for row in rows]
    completed = [int(row[1]) / 1000 for row in rows]
    latencies = [(done - enqueued) * 1000 for enqueued, done in zip(created, completed, strict=True)]
    metrics: dict[str, object] = {"per_second": rate(len(rows), min(created), max(completed))}
    metrics.update(latency_metrics(latencies))
    body = (
        "one no-op step"
        if workload == "jobs"
        else "two no-op steps around DBOS.sleep(0.001) (sleep(0) is not durable)"
    )
    return measured(
        SYSTEM,
        workload,
        size,
        metrics,
        f"a workflow of {body}; {workers} worker processes on one DBOS queue, worker_concurrency "
        f"{concurrency}, polled every {QUEUE_POLL_SECONDS} s; enqueued by DBOSClient in transactions "
        f"of {ENQUEUE_BATCH}; latency = workflow_status completed_at - created_at; runs per worker: "
        + ", ".join(f"{executor} {runs}" for executor, runs in shares),
    )


def process_threads_and_rss(pid: int) -> tuple[int, int]:
    """Threads and resident MiB of ``pid`` (from /proc), to show what schedules cost a process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) // 1024


def schedules(dsn: str, ready_dir: Path, size: int, workers: int, concurrency: int) -> dict[str, object]:
    if size >= TOO_MANY_SCHEDULES:
        return not_measured(
            SYSTEM,
            "schedules",
            f"DBOS runs one OS thread per schedule in every worker process (dbos/_scheduler.py, "
            f"_ScheduleThread): {size} schedules are {size} threads per worker. Tried at 10,000 with two "
            "workers on the 2-core machine: the load average rose to about 1,000 within two minutes and "
            "the system database connections timed out (psycopg ConnectionTimeout) before the measured "
            "minute; at 1,000 a worker had 1,025 threads and 110 MiB resident",
        )
    pool = Workers(dsn, ready_dir)
    try:
        # The first worker applies the schedules; every worker fires them, deduplicated by run id.
        pool.start("worker0", concurrency, schedule_count=size)
        for index in range(1, workers):
            pool.start(f"worker{index}", concurrency)
        # Each worker notices the schedules within its scheduler poll (1 s) and starts a thread each.
        live = time.time() + 2
        slot = next_minute_boundary(live + 60)
        suffix = scheduled_workflow_suffix(slot)
        started_sql = "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s AND started_at_epoch_ms IS NOT NULL"
        while time.time() < slot + SCHEDULE_GRACE_SECONDS:
            pool.alive()
            if time.time() > slot and count(dsn, started_sql, ("sched-%" + suffix,)) >= size:
                break
            time.sleep(0.5)
        threads, rss = process_threads_and_rss(pool.processes[0].pid)
    finally:
        pool.stop()
    rows = query(
        dsn,
        "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid LIKE %s AND started_at_epoch_ms IS NOT NULL",
        ("sched-%" + suffix,),
    )
    starts = [int(row[0]) / 1000 for row in rows]
    if len(starts) < size:
        return not_measured(
            SYSTEM,
            "schedules",
            f"of {size} schedules on a one-minute cron, {len(starts)} runs started within "
            f"{SCHEDULE_GRACE_SECONDS:.0f} s of their minute",
        )
    lateness = [(start - slot) * 1000 for start in starts]
    metrics: dict[str, object] = {"slots_per_second": rate(size, slot, max(starts))}
    metrics.update(latency_metrics(lateness, prefix="lateness_"))
    return measured(
        SYSTEM,
        "schedules",
        size,
        metrics,
        f"{size} schedules (DBOS.apply_schedules, cron '{ONE_MINUTE}') run on the queue by {workers} "
        f"workers; lateness = started_at_epoch_ms - minute; slots_per_second = size / (last start - "
        f"minute). Fires on seconds: yes (6-field cron, seconds first). Time zones: yes (cron_timezone, "
        f"IANA). One thread per schedule per process: worker0 had {threads} threads, {rss} MiB RSS. "
        "DBOS sleeps each schedule's thread up to 10% of the wait (at most 10 s) longer on purpose, "
        "against thundering herds, so on a one-minute cron up to 6 s of lateness is by design.",
    )


def recovery(dsn: str, ready_dir: Path, size: int, timeout: float) -> dict[str, object]:
    pool = Workers(dsn, ready_dir)
    try:
        pool.start("recovering", 0)
        # Every run sleeps until one common instant, far enough out for all N to be inside the sleep.
        wake_at = time.time() + 20 + size / 50
        enqueue(dsn, "sleep_until_flow", size, wake_at)
        wait_until(
            lambda: (
                pool.alive()
                and count(
                    dsn, "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'DBOS.sleep'"
                )
                >= size
            ),
            timeout=max(0.0, wake_at - time.time() - 1),
            what=f"{size} workflows inside their sleep before it ends",
            interval=0.2,
        )
        pool.kill()
        open_runs = size - succeeded(dsn, "sleep_until_flow")
        # Past the instant, recovered runs can go straight on: what is timed is recovery, not sleep.
        time.sleep(max(0.0, wake_at - time.time()) + 0.5)
        restarted = time.monotonic()
        launch_seconds = pool.start("recovering", 0)
        wait_until(
            lambda: pool.alive() and succeeded(dsn, "sleep_until_flow") >= size,
            timeout=timeout,
            what=f"{size} recovered workflows finished",
            interval=0.1,
        )
        seconds_to_progress = time.monotonic() - restarted
    finally:
        pool.stop()
    return measured(
        SYSTEM,
        "recovery",
        size,
        {"seconds_to_progress": round(seconds_to_progress, 3)},
        f"{open_runs} open workflows (one step done, inside a durable sleep) when the worker was "
        "SIGKILLed; restarted with the same executor id, DBOS.launch recovered them (launch took "
        f"{launch_seconds:.2f} s); time from restart to all {size} past their second step",
    )


REPLAY = (
    "DBOS has no replayer: it records each step's output and, on recovery, re-runs the workflow "
    "function skipping recorded steps; there is no API to replay a history without executing it"
)


def main(argv: list[str]) -> None:
    if argv[:1] == ["_worker"]:
        dsn, executor_id, concurrency, ready_file, schedule_count = argv[1:6]
        run_worker(dsn, executor_id, int(concurrency), ready_file, int(schedule_count))
        return
    args = adapter_arguments(SYSTEM, argv)
    if args.workload == "replay":
        emit(not_measured(SYSTEM, "replay", REPLAY))
        return
    with scratch_database(args.pg_dsn) as dsn, tempfile.TemporaryDirectory(prefix="dbos-bench-") as ready:
        ready_dir = Path(ready)
        if args.workload == "jobs":
            result = queued_runs(
                dsn, ready_dir, "noop_job", "jobs", args.size, args.workers, args.concurrency, args.timeout
            )
        elif args.workload == "workflows":
            result = queued_runs(
                dsn,
                ready_dir,
                "two_step_flow",
                "workflows",
                args.size,
                args.workers,
                args.concurrency,
                args.timeout,
            )
        elif args.workload == "schedules":
            result = schedules(dsn, ready_dir, args.size, args.workers, args.concurrency)
        else:
            result = recovery(dsn, ready_dir, args.size, args.timeout)
    emit(result)


if __name__ == "__main__":
    main(sys.argv[1:])
