"""Where one in-process claimer spends its CPU per run: cProfile over a backlog of no-op runs.

A backlog of JobDue records is produced first; then one claimer (in this process, so cProfile
sees every loop) consumes, claims, runs the no-op handler, records the outcome and relays its
outbox until every RunCompleted is published. Prints runs/s, CPU ms per run and the top functions.

    .venv/bin/python bench/claimer_profile.py --jobs 10000 [--no-profile] [--uvloop]
"""

import argparse
import asyncio
import cProfile
import io
import pstats
import resource
import time

from _common import bench_topics
from claimer_support import fresh_database
from claimer_throughput import produce, published_completions

from slotflow.contracts.topics import RUN_EVENTS
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import ClaimerSettings, Settings


async def _noop(ctx: RunContext) -> None:
    return None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(jobs: int, in_flight: int, profile: bool, top: int, dump: str | None = None) -> None:
    async with bench_topics() as kafka, fresh_database() as (dsn, pool):
        await produce(kafka, jobs)
        registry = HandlerRegistry()
        registry.register("bench.noop", _noop)
        settings = Settings(
            claimer=ClaimerSettings(claimer_id="profile", max_in_flight=in_flight, lease_ttl_seconds=30),
            kafka=KafkaSettings.model_validate(kafka.model_dump()),
            postgres=PostgresSettings(dsn=dsn),
        )
        claimer = ClaimerService(settings, registry=registry)
        topic = kafka.topic(RUN_EVENTS)
        profiler = cProfile.Profile() if profile else None
        cpu0, t0 = _cpu(), time.perf_counter()
        if profiler:
            profiler.enable()
        await claimer.start()
        while await published_completions(pool, topic) < jobs:
            await asyncio.sleep(0.1)
        if profiler:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - t0, _cpu() - cpu0
        await claimer.stop()
        print(f"{jobs / elapsed:.0f} runs/s, {1000 * cpu / jobs:.3f} CPU ms per run (incl. start-up)")
        if profiler and dump:
            profiler.dump_stats(dump)
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
            print(out.getvalue())
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
            print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--dump", default=None, help="also write the raw profile here (pstats format)")
    args = parser.parse_args()
    coro = run(args.jobs, args.in_flight, not args.no_profile, args.top, args.dump)
    if args.uvloop:
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


if __name__ == "__main__":
    main()
