"""slotflow's side of the peer benchmarks, built from the benchmarks bench/ already has.

    .venv/bin/python bench/peers/slotflow.py <workload> --size N --pg-dsn DSN --kafka-bootstrap HOST:PORT

Every workload runs in a scratch database and topic namespace of its own, dropped afterwards:

- jobs: N JobDue records produced to the jobs topic (12 partitions) in chunks of CHUNK, consumed
  by `--workers` claimer processes (`python -m slotflow_claimer`, the no-op `bench.noop` handler,
  up to 256 runs in flight each), claimed, run, completed and their RunCompleted published by the
  outbox relay. Latency per job: RunCompleted published (outbox.published_at) minus the moment its
  chunk's send was acknowledged; throughput: N over the first send to the last RunCompleted.
  bench/claimer_throughput.py's machinery, with per-job latency.
- workflows: bench/orchestrator_e2e.py's run (one ticker, one claimer, one orchestrator process;
  `bench.two_steps`: two no-op activities and a zero-length durable timer). Throughput: N over the
  first workflow started to the last completed (the orchestrator's rows); latency: completed minus
  the StartWorkflow's publication.
- replay: bench/workflow_replay.py's measurement: a history of N events (10,000 by default)
  recorded by the runtime itself, replayed by `Replayer.replay` (CPU time of this process).
- schedules: N schedules on `* * * * *` stored as CreateSchedule stores them, one ticker process and
  `--workers` claimers. The first minute warms up; the slots of the next MINUTES minute(s) count.
  Lateness: the run started by a claimer (runs.started_at) minus its slot; also the JobDue's relay
  (ticker outbox published_at) minus the slot. Slots/s: N over the slot to the last run started.
- recovery: bench/orchestrator_e2e.py's recovery run: N `bench.waits` workflows open (waiting on
  a signal), the orchestrator SIGKILLed and a new one started at once (session timeout 6 s, the
  broker's minimum), every workflow signalled at the kill. seconds_to_progress: the kill to the last
  workflow having moved on (completed); also to the first completion on every shard.
"""

import sys
from pathlib import Path

# Run as a script, bench/peers/ comes first on sys.path, where this very file would stand in for
# the slotflow package: the bench directory goes there instead (peers.*, the bench's shared modules).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import asyncio
import contextlib
import gc
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import claimer_throughput
import orchestrator_e2e
import workflow_replay
from _common import bench_topics
from _ticker_support import fresh_database as ticker_database
from claimer_support import ClaimerProcess, fresh_database, wait_group_stable
from ticker_lateness import seed_rows

from peers.common import latency_metrics, parse_args, percentile, result
from slotflow.contracts import CronSpec, ScheduleDefinition
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_claimer.events import job_due_envelope

SYSTEM = "slotflow"
#: JobDue records per acknowledged send: each chunk's acknowledgement is its jobs' enqueue instant.
CHUNK = 1000
#: Runs in flight per claimer (claimer_throughput's default, the bare loop's claim batch).
IN_FLIGHT = 256
#: The broker's minimum session timeout: the orchestrator's failure is detected that much sooner.
SESSION_TIMEOUT_MS = 6000
#: Minutes of slots counted in the schedules workload, after one warm-up minute.
MINUTES = 1


@contextlib.contextmanager
def log_dir() -> Iterator[Path]:
    """Where the service processes write their logs: BENCH_LOG_DIR to keep them, a temporary
    directory (removed afterwards) otherwise."""
    kept = os.environ.get("BENCH_LOG_DIR")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        yield Path(kept)
        return
    with tempfile.TemporaryDirectory(prefix="slotflow-peers-") as scratch:
        yield Path(scratch)


async def produce_timed(kafka: KafkaSettings, count: int) -> dict[str, datetime]:
    """Produce ``count`` JobDue records; when each one's chunk was acknowledged, by run id."""
    now = datetime.now(UTC)
    topic = kafka.topic(JOBS_DUE)
    enqueued: dict[str, datetime] = {}
    async with Producer(kafka, client_id="bench-peers-feed", linger_ms=5) as producer:
        dues = claimer_throughput.jobs(count, "peers")
        for first in range(0, count, CHUNK):
            chunk = dues[first : first + CHUNK]
            records = []
            for job in chunk:
                envelope = job_due_envelope(job, at=now)
                records.append(
                    OutgoingRecord(topic, envelope.key.encode(), encode(envelope), envelope_headers(envelope))
                )
            await producer.send_raw_many(records)
            acknowledged = datetime.now(UTC)
            enqueued.update((job.run_id, acknowledged) for job in chunk)
    return enqueued


async def jobs(count: int, workers: int, logs: Path) -> dict[str, float]:
    async with bench_topics() as kafka, fresh_database() as (dsn, pool):
        claimers = [
            ClaimerProcess(
                f"bench-claimer-{i}", kafka, dsn, logs, max_in_flight=IN_FLIGHT, lease_ttl_seconds=30
            )
            for i in range(workers)
        ]
        try:
            for claimer in claimers:
                await claimer.wait_ready()
            await wait_group_stable(kafka, f"{kafka.topic_namespace}.slotflow-claimer", workers)
            started = datetime.now(UTC)
            enqueued = await produce_timed(kafka, count)
            completed_topic = kafka.topic(RUN_EVENTS)
            deadline = time.monotonic() + max(600.0, count / 20)
            while await claimer_throughput.published_completions(pool, completed_topic) < count:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{count} jobs did not complete in time")
                await asyncio.sleep(0.2)
            rows = await pool.fetch(
                "SELECT regexp_replace(event_id, '/[0-9]+/completed$', '') AS run_id, published_at "
                "FROM claimer.outbox_events WHERE topic = $1 AND event_id LIKE '%/completed'",
                completed_topic,
            )
        finally:
            for claimer in claimers:
                claimer.stop()
    if len(rows) != count:
        raise SystemExit(f"{len(rows)} RunCompleted for {count} jobs")
    latencies = [(r["published_at"] - enqueued[r["run_id"]]).total_seconds() for r in rows]
    last = max(r["published_at"] for r in rows)
    return latency_metrics(latencies, count, (last - started).total_seconds())


async def workflows(count: int, logs: Path) -> dict[str, float]:
    run = await orchestrator_e2e.one_run(count, logs)
    return {
        "per_second": run["workflows_per_second"],
        "p50_ms": 1000 * run["latency_p50_seconds"],
        "p99_ms": 1000 * run["latency_p99_seconds"],
    }


def replay(events: int) -> dict[str, float]:
    workflow_replay.measure(workflow_replay.record(200))  # pydantic builds its validators on first use
    history = workflow_replay.record(events)
    gc.collect()
    gc.freeze()  # the recorded history is not the collector's to walk on every replay
    try:
        measured = workflow_replay.measure(history)
    finally:
        gc.unfreeze()
    return {
        "events_per_second": measured["replay_events_per_s"],
        "decode_events_per_second": measured["decode_events_per_s"],
    }


async def schedules(count: int, workers: int, logs: Path) -> dict[str, float]:
    definition = ScheduleDefinition(spec=CronSpec(expression="* * * * *"), handler="bench.noop")
    text = definition.model_dump_json()
    async with bench_topics() as kafka, ticker_database() as (dsn, pool):
        db_now: datetime = await pool.fetchval("SELECT now()")
        first_minute = db_now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if first_minute - db_now < timedelta(seconds=20):
            first_minute += timedelta(minutes=1)  # room to seed and start the processes
        just_before = first_minute - timedelta(microseconds=1)
        await seed_rows(
            pool, [(f"s{i}", text, first_minute, first_minute, just_before) for i in range(count)]
        )
        window_start = first_minute + timedelta(minutes=1)
        window_end = window_start + timedelta(minutes=MINUTES)
        services: list[orchestrator_e2e.Service | ClaimerProcess] = [
            orchestrator_e2e.Service("ticker", kafka, dsn, logs, batch_size=2000),
            *(
                ClaimerProcess(f"bench-claimer-{i}", kafka, dsn, logs, max_in_flight=IN_FLIGHT)
                for i in range(workers)
            ),
        ]
        try:
            for service in services:
                await service.wait_ready()
            expected = count * MINUTES
            deadline = time.monotonic() + (window_end - datetime.now(UTC)).total_seconds() + 180
            while await started_in(pool, window_start, window_end) < expected:
                if time.monotonic() > deadline:
                    raise SystemExit(f"not all {expected} slots of the window started in time")
                await asyncio.sleep(1)
            runs = await pool.fetch(
                "SELECT slot, started_at FROM claimer.runs WHERE slot >= $1 AND slot < $2",
                window_start,
                window_end,
            )
            relayed = await pool.fetch(
                "SELECT (convert_from(value, 'UTF8')::jsonb -> 'data' ->> 'slot')::timestamptz AS slot, "
                "published_at FROM ticker.outbox WHERE topic = $1 AND published_at IS NOT NULL",
                kafka.topic(JOBS_DUE),
            )
        finally:
            for service in services:
                service.stop()
    lateness = [(r["started_at"] - r["slot"]).total_seconds() for r in runs]
    relay = [
        (r["published_at"] - r["slot"]).total_seconds()
        for r in relayed
        if window_start <= r["slot"] < window_end
    ]
    drain_rates = []
    for slot in {r["slot"] for r in runs}:
        started = [r["started_at"] for r in runs if r["slot"] == slot]
        drain_rates.append(len(started) / max((max(started) - slot).total_seconds(), 1e-3))
    return {
        "lateness_p50_ms": 1000 * percentile(lateness, 0.50),
        "lateness_p99_ms": 1000 * percentile(lateness, 0.99),
        "slots_per_second": percentile(drain_rates, 0.5),
        "jobdue_relayed_p50_ms": 1000 * percentile(relay, 0.50),
        "jobdue_relayed_p99_ms": 1000 * percentile(relay, 0.99),
    }


async def started_in(pool: Pool, start: datetime, end: datetime) -> int:
    value = await pool.fetchval(
        "SELECT count(*) FROM claimer.runs WHERE slot >= $1 AND slot < $2 AND started_at IS NOT NULL",
        start,
        end,
    )
    return int(value)


async def recovery(count: int, logs: Path) -> dict[str, float]:
    run = await orchestrator_e2e.recovery_run(count, logs, orchestrator_e2e.CURRENT, SESSION_TIMEOUT_MS)
    return {
        "seconds_to_progress": run["drain_seconds"],
        "every_shard_progress_seconds": run["recovery_seconds"],
        "leases_taken_seconds": run["leases_taken_seconds"],
    }


NOTES = {
    "jobs": "{workers} claimer processes, up to 256 runs in flight each; end to end through Kafka "
    "(JobDue in, RunCompleted published by the outbox relay)",
    "workflows": "one orchestrator, one claimer, one ticker process (bench/orchestrator_e2e.py); "
    "throughput from the first workflow started to the last completed",
    "replay": "Replayer.replay over a history recorded by the runtime (activities, a timer every 50th); "
    "CPU time of one process",
    "schedules": "one ticker and {workers} claimer processes; lateness to the run started by a claimer; "
    "slots/s: the minute's slots over the slot to the last one started; fires on seconds: yes "
    "(6-field cron); time zones: yes (CronSpec.timezone)",
    "recovery": "orchestrator SIGKILLed with the workflows waiting on a signal, a new one started at "
    f"once, session timeout {SESSION_TIMEOUT_MS} ms; every workflow signalled at the kill",
}


async def main() -> None:
    args = parse_args("slotflow's side of the peer benchmarks")
    os.environ["SLOTFLOW_PG_DSN"] = args.pg_dsn
    if args.kafka_bootstrap:
        os.environ["SLOTFLOW_KAFKA_BOOTSTRAP"] = args.kafka_bootstrap
    elif args.workload != "replay" and "SLOTFLOW_KAFKA_BOOTSTRAP" not in os.environ:
        raise SystemExit(f"{args.workload} needs --kafka-bootstrap")
    # The bench helpers report progress on stdout; this adapter's stdout is its JSON line only.
    with log_dir() as logs, contextlib.redirect_stdout(sys.stderr):
        if args.workload == "jobs":
            metrics = await jobs(args.size, args.workers, logs)
        elif args.workload == "workflows":
            metrics = await workflows(args.size, logs)
        elif args.workload == "replay":
            metrics = replay(args.size)
        elif args.workload == "schedules":
            metrics = await schedules(args.size, args.workers, logs)
        else:  # recovery: parse_args allows no other workload
            metrics = await recovery(args.size, logs)
    print(
        result(SYSTEM, args.workload, args.size, metrics, NOTES[args.workload].format(workers=args.workers))
    )


if __name__ == "__main__":
    asyncio.run(main())
