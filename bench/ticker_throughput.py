"""Benchmark (a): JobDue per second one ticker turns out, against a bare SKIP LOCKED claim loop.

    .venv/bin/python bench/ticker_throughput.py [--schedules 100000] [--batch 500] [--runs 3]

Each run uses a fresh database holding `--schedules` schedules with exactly one slot due each.
Measured, one after the other on the same database server in the same run:

- bare:      `UPDATE bare SET next_fire_at = next_fire_at + 1 h WHERE id IN (SELECT id ... WHERE
             next_fire_at <= now() ORDER BY next_fire_at FOR UPDATE SKIP LOCKED LIMIT batch)` in a
             loop until nothing is due: the floor cost of claiming, with nothing else done. Once
             with one connection, once with `--concurrency` loops at once (as the ticker drains).
- interval:  the ticker's own claim loop (`SlotClaimer.claim_schedules`, the code the service runs)
             over interval schedules: claim, plan the slot and the next one, stage one JobDue per
             slot in the outbox, advance the grid, commit; `--concurrency` claim transactions at
             once, as the ticker runs them while a backlog lasts. Slots staged per second.
- cron:      the same over hourly cron schedules (each grid step runs the cron matcher).
- published: interval again, with the outbox relay running in the same process and publishing to
             Kafka (idempotent producer, acks=all); the clock stops when the last row is published.

Ratios are ticker / bare from the same run. With `--loops asyncio uvloop` (the default) every run
is made once on each event loop, alternating, and the uvloop / asyncio ratio is given per run. Results: stdout (Markdown) and
bench/results/ticker_throughput.json.
"""

import argparse
import asyncio
import json
import os
import time
from datetime import UTC, datetime, timedelta

from _common import RESULTS, bench_topics, fingerprint, median
from _ticker_support import backend_cpu, cpu_spent, fresh_database, seed, server_version

from slotflow.contracts import CronSpec, IntervalSpec, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.outbox import OutboxRelay
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_ticker.claims import SlotClaimer
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import Queries

BARE = """
UPDATE bare SET next_fire_at = next_fire_at + interval '1 hour'
 WHERE id IN (SELECT id FROM bare WHERE next_fire_at <= now()
               ORDER BY next_fire_at FOR UPDATE SKIP LOCKED LIMIT $1)
"""


def interval_definition(now: datetime) -> ScheduleDefinition:
    anchor = now.replace(microsecond=0) - timedelta(seconds=1)
    return ScheduleDefinition(
        spec=IntervalSpec(every=timedelta(hours=1), anchor=anchor), handler="bench.noop"
    )


HOURLY = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="bench.noop")


async def bare_loop(pool: Pool, count: int, batch: int, concurrency: int) -> float:
    await pool.execute("CREATE TABLE bare (id bigint PRIMARY KEY, next_fire_at timestamptz NOT NULL)")
    await pool.execute("CREATE INDEX bare_due ON bare (next_fire_at)")
    await pool.execute(
        "INSERT INTO bare SELECT i, now() - interval '1 second' FROM generate_series(1, $1) AS i", count
    )
    await pool.execute("VACUUM ANALYZE bare")

    async def loop() -> int:
        claimed = 0
        async with pool.acquire() as conn:
            while True:
                status = await conn.execute(BARE, batch)
                moved = int(status.split()[-1])
                claimed += moved
                if moved == 0:
                    return claimed

    started, pg = time.perf_counter(), await backend_cpu(pool)
    claimed = sum(await asyncio.gather(*(loop() for _ in range(concurrency))))
    elapsed = time.perf_counter() - started
    if claimed != count:
        raise SystemExit(f"bare loop claimed {claimed} of {count}")
    CPU_US_PER_SLOT[f"bare x{concurrency} pg"] = cpu_spent(pg, await backend_cpu(pool)) / claimed * 1e6
    return claimed / elapsed


def claimer(pool: Pool, kafka: KafkaSettings, batch: int) -> SlotClaimer:
    return SlotClaimer(
        pool,
        schema="ticker",
        queries=Queries.for_schema("ticker"),
        events=EventFactory(Topics.of(kafka), source="ticker/bench"),
        metrics=TickerMetrics(),
        batch_size=batch,
        max_slots=1000,
    )


async def claim_until_idle(claim: SlotClaimer, concurrency: int) -> int:
    """The ticker's drain: `concurrency` claim transactions at once until nothing is due."""

    async def loop() -> int:
        fired = 0
        while True:
            result = await claim.claim_schedules()
            fired += result.fired
            if result.claimed == 0:
                return fired

    return sum(await asyncio.gather(*(loop() for _ in range(concurrency))))


#: The claim loop's own CPU time (this process: planning, encoding, asyncpg) per slot, by spec kind.
CPU_US_PER_SLOT: dict[str, float] = {}


async def ticker_loop(
    pool: Pool, kafka: KafkaSettings, definition: ScheduleDefinition, count: int, batch: int, concurrency: int
) -> float:
    # One due slot per schedule: the interval's anchor, or the hour that began last (late but a
    # single missed slot, which fire_once fires).
    first = "date_trunc('hour', now())"
    if isinstance(definition.spec, IntervalSpec):
        first = f"'{definition.spec.anchor.isoformat()}'::timestamptz"
    await seed(pool, count=count, definition=definition, first_fire=first)
    started, cpu, pg = time.perf_counter(), time.process_time(), await backend_cpu(pool)
    fired = await claim_until_idle(claimer(pool, kafka, batch), concurrency)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if fired != count:
        raise SystemExit(f"ticker fired {fired} of {count}")
    CPU_US_PER_SLOT[definition.spec.kind] = cpu / fired * 1e6
    CPU_US_PER_SLOT[f"{definition.spec.kind} pg"] = cpu_spent(pg, await backend_cpu(pool)) / fired * 1e6
    return fired / elapsed


async def published_loop(pool: Pool, kafka: KafkaSettings, count: int, batch: int, concurrency: int) -> float:
    definition = interval_definition(datetime.now(UTC))
    anchor = definition.spec.anchor if isinstance(definition.spec, IntervalSpec) else None
    await seed(pool, count=count, definition=definition, first_fire=f"'{anchor}'::timestamptz")
    async with Producer(kafka, client_id="bench-relay") as producer:
        settings = TickerSettings(metrics_port=0)
        relay = OutboxRelay(
            pool,
            producer,
            schema="ticker",
            batch_size=settings.relay_batch_size,
            idle_interval=0.01,
            one_transaction=settings.relay_one_transaction,
        )
        stop = asyncio.Event()
        relaying = asyncio.create_task(relay.run(stop))
        started = time.perf_counter()
        fired = await claim_until_idle(claimer(pool, kafka, batch), concurrency)
        while await relay.pending():
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        stop.set()
        await relaying
    if fired != count:
        raise SystemExit(f"ticker fired {fired} of {count}")
    return fired / elapsed


async def one_run(kafka: KafkaSettings, count: int, batch: int, concurrency: int) -> dict[str, float]:
    result: dict[str, float] = {}
    wide = f"bare x{concurrency}"
    async with fresh_database() as (_, pool):
        result["bare"] = await bare_loop(pool, count, batch, 1)
    async with fresh_database() as (_, pool):
        result[wide] = await bare_loop(pool, count, batch, concurrency)
    async with fresh_database() as (_, pool):
        definition = interval_definition(datetime.now(UTC))
        result["interval"] = await ticker_loop(pool, kafka, definition, count, batch, concurrency)
    async with fresh_database() as (_, pool):
        result["cron"] = await ticker_loop(pool, kafka, HOURLY, count, batch, concurrency)
    async with fresh_database() as (_, pool):
        result["published"] = await published_loop(pool, kafka, count, batch, concurrency)
    result["interval cpu us/slot"] = CPU_US_PER_SLOT["interval"]
    result["interval pg cpu us/slot"] = CPU_US_PER_SLOT["interval pg"]
    result["cron cpu us/slot"] = CPU_US_PER_SLOT["cron"]
    result["cron pg cpu us/slot"] = CPU_US_PER_SLOT["cron pg"]
    result["bare pg cpu us/slot"] = CPU_US_PER_SLOT["bare x1 pg"]
    result[f"{wide} pg cpu us/slot"] = CPU_US_PER_SLOT[f"bare x{concurrency} pg"]
    for key in ("interval", "cron", "published"):
        result[f"{key}/bare"] = result[key] / result["bare"]
        result[f"{key}/{wide}"] = result[key] / result[wide]
    return {k: round(v, 3 if "/" in k else 0) for k, v in result.items()}


async def topics_and_run(count: int, batch: int, concurrency: int) -> dict[str, float]:
    async with bench_topics() as kafka:
        return await one_run(kafka, count, batch, concurrency)


def run_on(loop: str, count: int, batch: int, concurrency: int) -> dict[str, float]:
    """One run with the whole bench (bare loops included) on the given event loop."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(topics_and_run(count, batch, concurrency))
    return asyncio.run(topics_and_run(count, batch, concurrency))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=TickerSettings(metrics_port=0).claim_concurrency)
    parser.add_argument(
        "--loops",
        nargs="+",
        choices=["asyncio", "uvloop"],
        default=["asyncio", "uvloop"],
        help="event loops to compare, each run once per loop (alternating, so the ratio is same-run)",
    )
    args = parser.parse_args()
    fingerprint_at_start = fingerprint(asyncio.run(server_version()))
    runs: dict[str, list[dict[str, float]]] = {loop: [] for loop in args.loops}
    for i in range(args.runs):
        for loop in args.loops:
            runs[loop].append(run_on(loop, args.schedules, args.batch, args.concurrency))
            runs[loop][-1]["load_1m"] = round(os.getloadavg()[0], 2)
            print(f"run {i + 1} ({loop}): {runs[loop][-1]}", flush=True)
    summary = {
        loop: {k: round(median([r[k] for r in results]), 3) for k in results[0]}
        for loop, results in runs.items()
    }
    report = {
        "fingerprint": fingerprint_at_start,
        "schedules": args.schedules,
        "batch": args.batch,
        "runs": runs,
        "median": summary,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ticker_throughput.json").write_text(json.dumps(report, indent=2))
    print(f"\nfingerprint: {json.dumps(report['fingerprint'])}")
    print(
        f"{args.schedules:,} schedules, batch {args.batch}, ticker claim concurrency {args.concurrency}, "
        f"median of {args.runs} runs\n"
    )
    wide = f"bare x{args.concurrency}"
    print(f"| loop | event loop | slots/s (per run) | median slots/s | ratio to bare | ratio to {wide} |")
    print("|---|---|---|---:|---:|---:|")
    for loop, results in runs.items():
        med = summary[loop]
        for key in ("bare", wide, "interval", "cron", "published"):
            ratios = (
                ("1", "")
                if key == "bare"
                else ("", "1")
                if key == wide
                else (str(med[f"{key}/bare"]), str(med[f"{key}/{wide}"]))
            )
            per_run = " / ".join(f"{r[key]:,.0f}" for r in results)
            print(f"| {key} | {loop} | {per_run} | {med[key]:,.0f} | {ratios[0]} | {ratios[1]} |")
    print("\nCPU per slot, µs (per run; median): the claim loop in this process, and the database backends")
    for loop, results in runs.items():
        for key in (
            "interval cpu us/slot",
            "interval pg cpu us/slot",
            "cron cpu us/slot",
            "cron pg cpu us/slot",
            "bare pg cpu us/slot",
            f"{wide} pg cpu us/slot",
        ):
            per_run = " / ".join(f"{r[key]:.0f}" for r in results)
            print(f"- {loop}, {key.removesuffix(' us/slot')}: {per_run}; median {summary[loop][key]:.0f}")
    if len(runs) == 2 and "uvloop" in runs and "asyncio" in runs:
        print("\nuvloop / asyncio, same run (per run; median):")
        for key in ("bare", "interval", "cron", "published"):
            same_run = [u[key] / a[key] for u, a in zip(runs["uvloop"], runs["asyncio"], strict=True)]
            print(f"- {key}: {' / '.join(f'{x:.2f}' for x in same_run)}; median {median(same_run):.2f}")


if __name__ == "__main__":
    main()
