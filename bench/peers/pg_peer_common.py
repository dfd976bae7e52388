"""What the PostgreSQL-backed peer adapters (procrastinate, DBOS Transact) share.

The pure parts (statistics, the result objects, DSN handling, cron arithmetic) are importable from
the project's environment and unit-tested there; the scratch database needs psycopg, which lives in
the peers' virtualenv only, so it is imported inside the function that uses it.
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from peers.common import DEFAULT_SIZES, WORKLOADS, percentile


def latency_metrics(latencies_ms: Sequence[float], prefix: str = "") -> dict[str, float]:
    """p50 and p99 of ``latencies_ms``, rounded to the microsecond, under the contract's names."""
    return {
        f"{prefix}p50_ms": round(percentile(latencies_ms, 0.50), 3),
        f"{prefix}p99_ms": round(percentile(latencies_ms, 0.99), 3),
    }


def rate(count: int, first: float, last: float) -> float:
    """``count`` events spread from ``first`` to ``last`` (seconds), per second."""
    span = last - first
    if span <= 0:
        raise ValueError(f"no time elapsed between {first} and {last}")
    return round(count / span, 2)


def measured(
    system: str, workload: str, size: int, metrics: dict[str, object], notes: str
) -> dict[str, object]:
    return {"system": system, "workload": workload, "size": size, "metrics": metrics, "notes": notes}


def not_measured(system: str, workload: str, reason: str) -> dict[str, object]:
    return {"system": system, "workload": workload, "not_measured": reason}


def emit(result: dict[str, object]) -> None:
    """The result as the last line on stdout, which is all the harness reads."""
    sys.stdout.flush()
    print(json.dumps(result, sort_keys=True), flush=True)


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointed at ``database`` (query parameters kept; they may hold paths with slashes)."""
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


def next_minute_boundary(after: float) -> int:
    """The first whole UTC minute (epoch seconds) strictly after ``after``."""
    return (math.floor(after / 60) + 1) * 60


def adapter_arguments(system: str, argv: Sequence[str]) -> argparse.Namespace:
    """The contract's adapter command line: ``<workload> --size N --pg-dsn DSN [...]``."""
    parser = argparse.ArgumentParser(prog=f"bench/peers/{system}.py", description=f"{system} peer benchmark")
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument(
        "--size", type=int, default=None, help="jobs, slots or workflows (default per workload)"
    )
    parser.add_argument("--pg-dsn", required=True, help="an admin DSN; a scratch database is made beside it")
    parser.add_argument("--kafka-bootstrap", default=None, help="unused: this peer needs PostgreSQL only")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=16, help="jobs each worker runs at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is abandoned")
    args = parser.parse_args(argv)
    if args.size is None:
        args.size = DEFAULT_SIZES[args.workload]
    if args.size < 1 or args.workers < 1 or args.concurrency < 1:
        parser.error("--size, --workers and --concurrency must be positive")
    return args


@contextmanager
def scratch_database(admin_dsn: str) -> Iterator[str]:
    """The DSN of a new, empty database on ``admin_dsn``'s server; dropped afterwards (peers venv)."""
    import psycopg

    name = f"peer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; ``TimeoutError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(interval)


def spawn_worker(script: Path, worker_args: Sequence[str]) -> subprocess.Popen[bytes]:
    """``script`` run again as a worker process with the same interpreter; its output to stderr.

    Workers never write to stdout: the harness reads the adapter's last stdout line as the result.
    """
    return subprocess.Popen(
        [sys.executable, str(script), "_worker", *worker_args],
        stdout=sys.stderr.fileno(),
        stderr=sys.stderr.fileno(),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop_workers(workers: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM every worker, then SIGKILL those still running after ``grace`` seconds."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def check_workers_alive(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        code = worker.poll()
        if code is not None:
            raise RuntimeError(f"worker process {worker.pid} exited early with status {code}")
