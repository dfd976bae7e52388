"""Benchmark (c): the ticker's claim query at 10,000 versus 1,000,000 stored schedules.

    .venv/bin/python bench/ticker_claim_scaling.py [--sizes 10000 1000000] [--due 500] [--runs 3] [--samples 200]

For each size, a fresh database holds that many daily schedules spread over the next 24 hours
(one in ten paused) plus `--due` rows already due. The measured statement is the claim exactly as
the ticker runs it (`SELECT ... FOR UPDATE SKIP LOCKED LIMIT batch` on the partial due index),
inside a transaction that is rolled back so every sample sees the same due set. Reported per size:
median and p99 of `--samples` executions, per run, and the median over runs; the same-run ratio
1M / 10k says whether the claim grows with the table. The plan of the claim at each size is printed.
Results: stdout (Markdown) and bench/results/ticker_claim_scaling.json.
"""

import argparse
import asyncio
import json
import time

from _common import RESULTS, fingerprint, median, percentile
from _ticker_support import fresh_database, seed

from slotflow.contracts import CronSpec, ScheduleDefinition
from slotflow_ticker.sql import Queries

DAILY = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="bench.noop")
Q = Queries.for_schema("ticker")


async def measure(size: int, *, due: int, runs: int, samples: int, batch: int) -> dict[str, object]:
    async with fresh_database() as (_, pool):
        started = time.monotonic()
        await seed(
            pool,
            count=size,
            definition=DAILY,
            first_fire="now() + (i % 86400) * interval '1 second' + interval '1 minute'",
        )
        await pool.execute("UPDATE ticker.schedules SET paused = true WHERE schedule_id LIKE '%0'")
        await seed(pool, count=due, definition=DAILY, first_fire="now() - interval '1 second'", prefix="due")
        seeded = time.monotonic() - started
        plan_rows = await pool.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + Q.claim_due, batch)
        plan = "\n".join(r[0] for r in plan_rows)
        per_run = []
        for _ in range(runs):
            timings = []
            async with pool.acquire() as conn:
                for _ in range(samples):
                    tx = conn.transaction()
                    await tx.start()
                    t0 = time.perf_counter()
                    rows = await conn.fetch(Q.claim_due, batch)
                    timings.append((time.perf_counter() - t0) * 1000)
                    await tx.rollback()
                    if len(rows) != min(batch, due):
                        raise SystemExit(f"claimed {len(rows)} rows, expected {min(batch, due)}")
            per_run.append(
                {"median_ms": round(median(timings), 3), "p99_ms": round(percentile(timings, 0.99), 3)}
            )
        server = await pool.fetchval("SHOW server_version")
        return {
            "size": size,
            "seed_seconds": round(seeded, 1),
            "runs": per_run,
            "median_ms": round(median([r["median_ms"] for r in per_run]), 3),
            "p99_ms": round(median([r["p99_ms"] for r in per_run]), 3),
            "plan": plan,
            "server": server,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--due", type=int, default=500)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    results = [
        await measure(size, due=args.due, runs=args.runs, samples=args.samples, batch=args.batch)
        for size in args.sizes
    ]
    report = {
        "fingerprint": fingerprint(str(results[0]["server"])),
        "batch": args.batch,
        "due": args.due,
        "results": results,
    }
    if len(results) >= 2:
        report["ratio_largest_to_smallest"] = round(
            float(results[-1]["median_ms"]) / float(results[0]["median_ms"]),  # type: ignore[arg-type]
            2,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ticker_claim_scaling.json").write_text(json.dumps(report, indent=2))
    print(f"fingerprint: {json.dumps(report['fingerprint'])}")
    print(f"claim of {args.batch} due rows (LIMIT {args.batch}), {args.samples} samples x {args.runs} runs\n")
    print("| stored schedules | median ms (per run) | p99 ms (per run) | median of runs |")
    print("|---:|---|---|---:|")
    for r in results:
        runs = r["runs"]
        assert isinstance(runs, list)
        print(
            f"| {r['size']:,} | {' / '.join(str(x['median_ms']) for x in runs)} "
            f"| {' / '.join(str(x['p99_ms']) for x in runs)} | {r['median_ms']} |"
        )
    if "ratio_largest_to_smallest" in report:
        print(
            f"\nratio {results[-1]['size']:,} / {results[0]['size']:,}: {report['ratio_largest_to_smallest']}"
        )
    for r in results:
        print(f"\nplan at {r['size']:,}:\n{r['plan']}")


if __name__ == "__main__":
    asyncio.run(main())
