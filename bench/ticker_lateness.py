"""Benchmark (b): firing lateness (Kafka record timestamp minus slot) with 100,000 schedules due
every minute, one ticker process.

    .venv/bin/python bench/ticker_lateness.py [--schedules 100000] [--minutes 2] [--runs 3] [--variants seconds jitter light]
        [--arm before:../old-checkout --arm after --arm loops2,SLOTFLOW_TICKER_RELAY_LOOPS=2]

Each run seeds a fresh database (rows exactly as CreateSchedule stores them) and a fresh topic
namespace, starts `python -m slotflow_ticker` as its own process, and reads the JobDue topic from
this process. Lateness is the record's timestamp (set by the ticker's producer when the relay sent
it) minus the instant the slot was meant to fire. Only slots of whole minutes after a warm-up
minute are counted. Variants:

- seconds: 6-field crons `S * * * * *` with S = i mod 60: every minute, 1/60 of the schedules share
           each whole second (bursts of ~1,667 slots per second). Lateness = timestamp - slot.
- jitter:  `* * * * *` with jitter up to 60 s: the same load spread evenly over the minute, which is
           what `jitter` is for. Lateness = timestamp - fire_at (slot + its jitter), as JobDue defines.
- light:   1,000 schedules of the `seconds` kind: the mechanism's floor (wheel, claim, relay).

Results: stdout (Markdown) and bench/results/ticker_lateness.json.
"""

import argparse
import asyncio
import contextlib
import glob
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from _common import RESULTS, bench_topics, fingerprint, median, percentile
from _ticker_support import fresh_database, server_version

from slotflow.contracts import CronSpec, ScheduleDefinition
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import JOBS_DUE
from slotflow.kafka.consumer import Consumer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_ticker.planning import fire_time

WARMUP = timedelta(minutes=1)


async def seed_rows(pool: Pool, rows: list[tuple[str, str, datetime, datetime, datetime]]) -> None:
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "schedules",
            schema_name="ticker",
            columns=["schedule_id", "definition", "next_slot", "next_fire_at", "covered_until"],
            records=rows,
        )
    await pool.execute("VACUUM ANALYZE ticker.schedules")


async def seed(pool: Pool, variant: str, count: int, first_minute: datetime) -> None:
    rows = []
    eps = timedelta(microseconds=1)
    if variant in ("seconds", "light"):
        defs = [
            ScheduleDefinition(
                spec=CronSpec(expression=f"{s} * * * * *"), handler="bench.noop"
            ).model_dump_json()
            for s in range(60)
        ]
        for i in range(count):
            slot = first_minute + timedelta(seconds=i % 60)
            rows.append((f"s{i}", defs[i % 60], slot, slot, slot - eps))
    else:
        definition = ScheduleDefinition(
            spec=CronSpec(expression="* * * * *"), handler="bench.noop", jitter=timedelta(seconds=60)
        )
        text = definition.model_dump_json()
        for i in range(count):
            fire = fire_time(f"s{i}", definition, first_minute)
            rows.append((f"s{i}", text, first_minute, fire, first_minute - eps))
    await seed_rows(pool, rows)


async def one_run(
    variant: str, count: int, minutes: int, arm_env: dict[str, str] | None = None
) -> dict[str, object]:
    async with bench_topics() as kafka, fresh_database() as (dsn, pool):
        db_now: datetime = await pool.fetchval("SELECT now()")
        first_minute = db_now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if first_minute - db_now < timedelta(seconds=20):
            first_minute += timedelta(minutes=1)
        await seed(pool, variant, count, first_minute)
        window_start = first_minute + WARMUP
        window_end = window_start + timedelta(minutes=minutes)
        env = {
            **os.environ,
            "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
            "SLOTFLOW_PG_DSN": dsn,
            "SLOTFLOW_TICKER_TICKER_ID": f"bench-{uuid.uuid4().hex[:6]}",
            "SLOTFLOW_TICKER_METRICS_PORT": "0",
            "SLOTFLOW_TICKER_BATCH_SIZE": "2000",
            **(arm_env or {}),
        }
        ticker = subprocess.Popen(
            [sys.executable, "-m", "slotflow_ticker", "--log-level", "WARNING", "run"], env=env
        )
        try:
            lateness, seen = await collect(kafka, variant, window_start, window_end, count * minutes)
        finally:
            ticker.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                ticker.wait(timeout=60)
            if ticker.poll() is None:
                ticker.kill()
        stages = await stage_lateness(pool, kafka, variant, window_start, window_end)
    expected = count * minutes
    return {
        "variant": variant,
        "schedules": count,
        "counted_slots": len(lateness),
        "expected_slots": expected,
        "distinct_runs": seen,
        "p50_ms": round(percentile(lateness, 0.50), 1),
        "p99_ms": round(percentile(lateness, 0.99), 1),
        "max_ms": round(max(lateness), 1),
        **stages,
    }


# Where the time goes, from the outbox rows the run left behind: `created_at` is the start of the
# claim transaction that staged the JobDue (its now()), `published_at` the start of the relay
# transaction that published it; the Kafka timestamp (above) is when the relay handed it over.
STAGES = """
WITH j AS (
    SELECT created_at, published_at, (convert_from(value, 'UTF8')::jsonb -> 'data') AS data
      FROM ticker.outbox WHERE topic = $1
), w AS (
    SELECT created_at, published_at, (data ->> $4)::timestamptz AS reference
      FROM j WHERE (data ->> 'slot')::timestamptz >= $2 AND (data ->> 'slot')::timestamptz < $3
)
SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM created_at - reference))
           AS claim,
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - reference))
           AS relay
  FROM w WHERE published_at IS NOT NULL
"""


async def stage_lateness(
    pool: Pool, kafka: KafkaSettings, variant: str, window_start: datetime, window_end: datetime
) -> dict[str, float]:
    reference = "fire_at" if variant == "jitter" else "slot"
    row = await pool.fetchrow(STAGES, kafka.topic(JOBS_DUE), window_start, window_end, reference)
    if row is None or row["claim"] is None:
        return {}
    return {
        "claim_start_p50_ms": round(row["claim"][0] * 1000, 1),
        "claim_start_p99_ms": round(row["claim"][1] * 1000, 1),
        "relay_start_p50_ms": round(row["relay"][0] * 1000, 1),
        "relay_start_p99_ms": round(row["relay"][1] * 1000, 1),
    }


async def collect(
    kafka: KafkaSettings, variant: str, window_start: datetime, window_end: datetime, expected: int
) -> tuple[list[float], int]:
    lateness: list[float] = []
    runs: set[str] = set()
    deadline = time.monotonic() + (window_end - datetime.now(UTC)).total_seconds() + 120
    async with Consumer(
        kafka,
        kafka.topic(JOBS_DUE),
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        client_id="bench",
        max_poll_records=5000,
    ) as consumer:
        while time.monotonic() < deadline:
            records = await consumer.poll(timeout_ms=500)
            for record in records:
                data = decode(record.value).data
                slot = datetime.fromisoformat(data["slot"])
                if not window_start <= slot < window_end:
                    continue
                runs.add(data["run_id"])
                reference = datetime.fromisoformat(data["fire_at"]) if variant == "jitter" else slot
                lateness.append((record.timestamp_ms or 0) - reference.timestamp() * 1000)
            if len(runs) >= expected:
                break  # every slot of the window arrived (a late duplicate would not change runs)
            if datetime.now(UTC) > window_end + timedelta(seconds=60) and not records:
                break
    if not lateness:
        raise SystemExit("no JobDue arrived in the measurement window")
    return lateness, len(runs)


def parse_arm(text: str) -> tuple[str, dict[str, str]]:
    head, *settings = text.split(",")
    name, _, checkout = head.partition(":")
    env = dict(setting.split("=", 1) for setting in settings)
    if checkout:
        root = os.path.abspath(checkout)
        # libs/*/src: the library, and slotflow-base where the checkout has it.
        paths = [f"{root}/services/ticker/src", *sorted(glob.glob(f"{root}/libs/*/src"))]
        env["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    return name, env


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--minutes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["seconds", "jitter", "light"])
    parser.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME[:CHECKOUT][,KEY=VALUE...]",
        help="compare arms in the same session, one run of each in turn: CHECKOUT runs another "
        "checkout's ticker and library (e.g. the commit before a change), KEY=VALUE sets ticker "
        "settings (SLOTFLOW_TICKER_RELAY_LOOPS=2); without --arm, one arm of this checkout",
    )
    args = parser.parse_args()
    arms = [parse_arm(text) for text in args.arm] or [("this", {})]
    report: dict[str, object] = {
        "fingerprint": fingerprint(await server_version()),
        "minutes": args.minutes,
        "arms": dict(arms),
    }
    summary = {}
    runs: dict[str, list[dict[str, object]]] = {}
    for variant in args.variants:
        count = 1000 if variant == "light" else args.schedules
        for i in range(args.runs):
            for name, arm_env in arms:
                label = variant if len(arms) == 1 else f"{variant} [{name}]"
                result = await one_run(variant, count, args.minutes, arm_env)
                result["load_average"] = os.getloadavg()
                runs.setdefault(label, []).append(result)
                print(f"{label} run {i + 1}: {result}", flush=True)
    report["runs"] = runs
    for variant, results in runs.items():
        summary[variant] = {
            key: median([float(r[key]) for r in results])  # type: ignore[arg-type]
            for key in (
                "p50_ms",
                "p99_ms",
                "max_ms",
                "counted_slots",
                "distinct_runs",
                "claim_start_p50_ms",
                "claim_start_p99_ms",
                "relay_start_p50_ms",
                "relay_start_p99_ms",
            )
            if all(key in r for r in results)
        }
    report["median"] = summary
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ticker_lateness.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\nfingerprint: {json.dumps(report['fingerprint'])}")
    print("| variant | schedules | p50 ms (median of runs) | p99 ms | max ms | slots counted per run |")
    print("|---|---:|---:|---:|---:|---:|")
    for variant, s in summary.items():
        count = 1000 if variant.startswith("light") else args.schedules
        print(
            f"| {variant} | {count:,} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['max_ms']:.1f} | {s['counted_slots']:,.0f} |"
        )
    print("\nWhere the time goes (medians of runs; ms after the slot's fire time, p50 / p99):\n")
    print("| variant | claim transaction began | relay transaction began | Kafka timestamp |")
    print("|---|---:|---:|---:|")
    for variant, s in summary.items():
        if "claim_start_p50_ms" in s:
            print(
                f"| {variant} | {s['claim_start_p50_ms']:.1f} / {s['claim_start_p99_ms']:.1f} "
                f"| {s['relay_start_p50_ms']:.1f} / {s['relay_start_p99_ms']:.1f} "
                f"| {s['p50_ms']:.1f} / {s['p99_ms']:.1f} |"
            )


if __name__ == "__main__":
    asyncio.run(main())
