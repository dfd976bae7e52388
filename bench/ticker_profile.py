"""Where one in-process ticker spends its CPU per slot: cProfile over one throughput variant.

Runs `published` (the claim loop and the outbox relay publishing to Kafka in this process), a
claim-only variant (`interval`, `cron`, `seconds`) of bench/ticker_throughput.py, or `relay` (the
interval claims first, unprofiled, then the relay alone draining their outbox) under cProfile,
timed by this thread's CPU clock (waits on the network cost nothing), and prints the top functions
by own time and by cumulative time.

    .venv/bin/python bench/ticker_profile.py --variant published --schedules 20000 [--dump out.prof]
"""

import argparse
import asyncio
import cProfile
import io
import pstats
import time
from datetime import UTC, datetime

from _common import bench_topics
from _ticker_support import backend_cpu, cpu_spent, fresh_database
from ticker_throughput import HOURLY, interval_definition, published_loop, ticker_loop

from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings
from slotflow_ticker.config import TickerSettings


async def relay_alone(pool: Pool, kafka: KafkaSettings, count: int, profiler: cProfile.Profile) -> float:
    """The relay draining ``count`` staged JobDue rows, nothing else running in this process."""
    profiler.disable()
    await ticker_loop(pool, kafka, interval_definition(datetime.now(UTC)), count, 500, 2)
    settings = TickerSettings(metrics_port=0)
    async with Producer(kafka, client_id="bench-relay") as producer:
        relay = OutboxRelay(
            pool,
            producer,
            schema="ticker",
            batch_size=settings.relay_batch_size,
            one_transaction=settings.relay_one_transaction,
        )
        await relay.relay_once()  # metadata and connections warm, outside the measure
        warm = relay.published
        pg, cpu, started = await backend_cpu(pool), time.process_time(), time.perf_counter()
        profiler.enable()
        while await relay.relay_once():
            pass
        profiler.disable()
        moved = relay.published - warm
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        pg_cpu = cpu_spent(pg, await backend_cpu(pool))
    # With the profiler on (unless --top 0), this process's figure includes its overhead.
    print(
        f"relay alone: {moved:,} rows, {moved / elapsed:,.0f} rows/s, {cpu / moved * 1e6:.1f} µs/row in "
        f"this process, {pg_cpu / moved * 1e6:.1f} µs/row in PostgreSQL"
    )
    return moved / elapsed


async def run(variant: str, count: int, batch: int, concurrency: int, profiler: cProfile.Profile) -> float:
    async with bench_topics() as kafka, fresh_database() as (_, pool):
        profiler.enable()
        try:
            if variant == "published":
                return await published_loop(pool, kafka, count, batch, concurrency)
            if variant == "relay":
                return await relay_alone(pool, kafka, count, profiler)
            definition = {"interval": interval_definition(datetime.now(UTC)), "cron": HOURLY}.get(variant)
            return await ticker_loop(pool, kafka, definition, count, batch, concurrency)
        finally:
            profiler.disable()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--variant", choices=["published", "relay", "interval", "cron", "seconds"], default="published"
    )
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--top", type=int, default=40, help="0: no profiler (plain CPU figures)")
    parser.add_argument("--dump", help="also write the raw profile here (pstats format)")
    args = parser.parse_args()
    profiler = cProfile.Profile(time.thread_time)
    if args.top == 0:
        profiler.enable = profiler.disable  # type: ignore[method-assign,assignment]
    rate = asyncio.run(run(args.variant, args.schedules, args.batch, args.concurrency, profiler))
    if args.top == 0:
        print(f"{args.variant}: {args.schedules:,} slots, {rate:,.0f} slots/s")
        return
    stats = pstats.Stats(profiler)
    if args.dump:
        stats.dump_stats(args.dump)
    total = stats.total_tt  # type: ignore[attr-defined]
    print(f"{args.variant}: {args.schedules:,} slots, {rate:,.0f} slots/s under the profiler")
    print(f"profiled CPU: {total:.2f} s, {total / args.schedules * 1e6:.1f} µs/slot\n")
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(args.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
