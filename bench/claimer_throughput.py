"""End-to-end claimer throughput against the bare SQL claim loop, in the same run.

End to end: JobDue records on the real topic (12 partitions) are consumed by two claimer
processes, claimed (one batched statement per poll, RunStarted staged in the same transaction),
run by a no-op handler, completed (fenced, RunCompleted staged) and published by the outbox relay.
The clock runs from the first claim to the last RunCompleted acknowledged by Kafka, both read
from the database (runs.started_at, outbox.published_at).

Baseline: the same claim and complete statements (`store.claim`, `store.record_outcomes`) in a
bare asyncpg loop, two workers, batches of the same size, on the same database: no Kafka, no
outbox, no handler. The ratio e2e / bare is what the claimer's machinery costs.

    .venv/bin/python bench/claimer_throughput.py --runs 3 --jobs 20000

Also reported per run: CPU per run of the claimer processes, of the PostgreSQL backends serving the
benchmark's database, and of the (shared) Kafka broker, and the load average. With
CLAIMER_PYTHONPATH=<other checkout>/libs/slotflow/src:<other checkout>/libs/slotflow-base/src:<other
checkout>/services/claimer/src (no slotflow-base before it existed) the claimer processes run
another version's code (before/after in one session).
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import RESULTS, bench_topics, fingerprint, process_cpu_seconds
from claimer_support import BackendCpu, ClaimerProcess, broker_pid, fresh_database, wait_group_stable

from slotflow.contracts import JobDue
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_claimer import store
from slotflow_claimer.app import migrate
from slotflow_claimer.events import job_due_envelope
from slotflow_claimer.runs import Due

SLOT0 = datetime(2026, 1, 1, tzinfo=UTC)


def jobs(count: int, prefix: str) -> list[JobDue]:
    return [
        JobDue(
            run_id=run_id(f"{prefix}{i % 1000}", SLOT0 + timedelta(seconds=i)),
            job_id=f"{prefix}{i % 1000}",
            slot=SLOT0 + timedelta(seconds=i),
            handler="bench.noop",
        )
        for i in range(count)
    ]


async def bare_loop(pool: Pool, count: int, batch: int, workers: int) -> tuple[float, float]:
    """Claim and complete ``count`` runs in batches with the claimer's statements; (runs/s,
    PostgreSQL backend CPU ms per run)."""
    await migrate(pool, "bare")
    now = datetime.now(UTC)
    dues = []
    for offset, job in enumerate(jobs(count, "bare")):
        envelope = job_due_envelope(job, at=now)
        record = Record("bench", 0, offset, job.job_id.encode(), encode(envelope), (), None)
        dues.append(Due(record, envelope, job))
    chunks = [dues[i : i + batch] for i in range(0, count, batch)]

    async def worker() -> int:
        done = 0
        while chunks:
            chunk = chunks.pop()
            async with pool.acquire() as conn:
                async with conn.transaction():
                    runs = await store.claim(conn, "bare", chunk, owner="bare", ttl=30.0)
                async with conn.transaction():
                    writes = [
                        store.OutcomeWrite(r.run_id, r.fence_token, "completed", "null", due=r.due)
                        for r in runs
                    ]
                    done += len(await store.record_outcomes(conn, "bare", writes))
        return done

    backends = BackendCpu(pool)
    await backends.start()
    started = time.perf_counter()
    completed = sum(await asyncio.gather(*(worker() for _ in range(workers))))
    elapsed = time.perf_counter() - started
    pg_cpu = await backends.seconds()
    if completed != count:
        raise SystemExit(f"bare loop completed {completed} of {count}")
    return count / elapsed, 1000 * pg_cpu / count


async def produce(kafka: KafkaSettings, count: int) -> None:
    now = datetime.now(UTC)
    topic = kafka.topic(JOBS_DUE)
    async with Producer(kafka, client_id="bench-feed", linger_ms=20) as producer:
        records = []
        for job in jobs(count, "e2e"):
            envelope = job_due_envelope(job, at=now)
            records.append(
                OutgoingRecord(topic, envelope.key.encode(), encode(envelope), envelope_headers(envelope))
            )
        for i in range(0, len(records), 5000):
            await producer.send_raw_many(records[i : i + 5000])


async def published_completions(pool: Pool, topic: str) -> int:
    """RunCompleted events published so far, or 0 while any event is still pending.

    The full count scans the whole outbox (tens of milliseconds of the database's CPU, which the
    figures would charge to the claimer), so it only runs once the cheap check through the pending
    index finds nothing left to publish.
    """
    if await pool.fetchval("SELECT EXISTS (SELECT 1 FROM claimer.outbox WHERE published_at IS NULL)"):
        return 0
    value = await pool.fetchval(
        "SELECT count(*) FROM claimer.outbox_events WHERE topic = $1 AND published_at IS NOT NULL "
        "AND event_id LIKE '%/completed'",
        topic,
    )
    return int(value)


async def _commits(pool: Pool) -> int:
    """Transactions committed in the benchmark's database so far (every client's, ours included)."""
    value = await pool.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    return int(value)


async def end_to_end(
    kafka: KafkaSettings,
    dsn: str,
    pool: Pool,
    count: int,
    claimers: int,
    in_flight: int,
    log_dir: Path,
    event_loop: str | None = None,
) -> dict[str, float]:
    procs = [
        ClaimerProcess(
            f"bench-claimer-{i}",
            kafka,
            dsn,
            log_dir,
            max_in_flight=in_flight,
            lease_ttl_seconds=30,
            **({"event_loop": event_loop} if event_loop else {}),
        )
        for i in range(claimers)
    ]
    try:
        for proc in procs:
            await proc.wait_ready()
        await wait_group_stable(kafka, f"{kafka.topic_namespace}.slotflow-claimer", claimers)
        cpu_before = [p.cpu_seconds() for p in procs]
        backends = BackendCpu(pool)
        await backends.start()
        broker = broker_pid()
        broker_before = process_cpu_seconds(broker) if broker else 0.0
        wall_before = time.monotonic()
        commits_before = await _commits(pool)
        await produce(kafka, count)
        completed_topic = kafka.topic(RUN_EVENTS)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if await published_completions(pool, completed_topic) >= count:
                break
            await asyncio.sleep(0.2)
        else:
            raise SystemExit("end-to-end run did not finish in 600 s")
        cpu = sum(p.cpu_seconds() - c for p, c in zip(procs, cpu_before, strict=True))
        pg_cpu = await backends.seconds()
        broker_cpu = (process_cpu_seconds(broker) - broker_before) if broker else float("nan")
        wall = time.monotonic() - wall_before
        commits = await _commits(pool) - commits_before
        window = await pool.fetchrow(
            "SELECT (SELECT min(started_at) FROM claimer.runs) AS first, "
            "(SELECT max(published_at) FROM claimer.outbox_events WHERE event_id LIKE '%/completed') AS last, "
            "(SELECT count(*) FROM claimer.runs WHERE state = 'completed' AND fence_token = 1) AS once"
        )
        assert window is not None  # scalar subqueries: always one row
        if window["once"] != count:
            raise SystemExit(f"{window['once']} of {count} runs completed on their first claim")
        seconds = (window["last"] - window["first"]).total_seconds()
        return {
            "runs_per_s": count / seconds,
            "claimer_cpu_ms_per_run": 1000 * cpu / count,
            # The database's backends for this benchmark's database only; the broker is shared with
            # whatever else runs on the machine (its figure is an upper bound), and includes
            # producing the JobDue backlog.
            "pg_backend_cpu_ms_per_run": 1000 * pg_cpu / count,
            "broker_cpu_ms_per_run": 1000 * broker_cpu / count,
            "pg_commits_per_1000_runs": 1000 * commits / count,
            "load_average_1m": os.getloadavg()[0],
            "wall_s": wall,
        }
    finally:
        for proc in procs:
            proc.stop()


async def one_run(
    count: int, claimers: int, in_flight: int, log_dir: Path, event_loop: str | None
) -> dict[str, float]:
    async with bench_topics() as kafka, fresh_database() as (dsn, pool):
        bare, bare_pg = await bare_loop(pool, count, in_flight, claimers)
        e2e = await end_to_end(kafka, dsn, pool, count, claimers, in_flight, log_dir, event_loop)
        return {
            "bare_runs_per_s": bare,
            "bare_pg_backend_cpu_ms_per_run": bare_pg,
            **{f"e2e_{k}": v for k, v in e2e.items()},
            "ratio": e2e["runs_per_s"] / bare,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument(
        "--in-flight", type=int, default=256, help="max runs in flight per claimer (= bare batch)"
    )
    parser.add_argument(
        "--event-loop",
        choices=["uvloop", "asyncio"],
        default=None,
        help="the claimers' event loop (default: their own default)",
    )
    parser.add_argument("--results", default="claimer_throughput.json", help="file name under bench/results")
    args = parser.parse_args()
    print(json.dumps(fingerprint()))
    results = []
    with tempfile.TemporaryDirectory() as logs:
        for i in range(args.runs):
            result = await one_run(args.jobs, args.claimers, args.in_flight, Path(logs), args.event_loop)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()), flush=True)
            results.append(result)
    summary = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print("median: " + ", ".join(f"{k} {v:.2f}" for k, v in summary.items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.results).write_text(
        json.dumps(
            {"args": vars(args), "fingerprint": fingerprint(), "runs": results, "median": summary}, indent=2
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
