"""Benchmark (a): JobDue per second one ticker turns out, against a bare SKIP LOCKED claim loop.

    .venv/bin/python bench/ticker_throughput.py [--schedules 100000] [--batch 500] [--runs 3]
        [--variants bare,interval,cron,seconds,published] [--arm before:../old-checkout --arm after]

Each run uses a fresh database holding `--schedules` schedules with exactly one slot due each.
Measured, one after the other on the same database server in the same run:

- bare:      `UPDATE bare SET next_fire_at = next_fire_at + 1 h WHERE id IN (SELECT id ... WHERE
             next_fire_at <= now() ORDER BY next_fire_at FOR UPDATE SKIP LOCKED LIMIT batch)` in a
             loop until nothing is due: the floor cost of claiming, with nothing else done. Once
             with one connection, once with `--concurrency` loops at once (as the ticker drains).
- interval:  the ticker's own claim loop (`SlotFirer.claim_schedules`, the code the service runs)
             over interval schedules: claim, plan the slot and the next one, stage one JobDue per
             slot in the outbox, advance the grid, commit; `--concurrency` claim transactions at
             once, as the ticker runs them while a backlog lasts. Slots staged per second.
- cron:      the same over hourly cron schedules (each grid step runs the cron matcher).
- seconds:   the same over 6-field seconds crons (`S * * * * *`), 30 definitions, S one of the 30
             seconds before the seed, so each schedule has one slot due 1 to 30 s ago: the everyday
             path (merely late, within the misfire grace), the next slot a minute on.
- published: interval again, with the outbox relay running in the same process and publishing to
             Kafka (idempotent producer, acks=all); the clock stops when the last row is published.
             Its CPU is read for this process (claim and relay), the database backends and the
             devstack's broker (`.devstack/kafka.pid`), with how long the relay went on publishing
             after the last claim.

`--variants` picks the loops (default all; ratios to bare need `bare`). `--arm NAME:CHECKOUT`
(repeatable) runs each run once per arm, in turn, in a child process that imports the ticker and
the library from CHECKOUT's sources (an arm without a checkout uses this one), so a before/after
pair comes from the same session. Ratios are ticker / bare from the same run. With `--loops asyncio uvloop` (the default) every run
is made once on each event loop, alternating, and the uvloop / asyncio ratio is given per run. Results: stdout (Markdown) and
bench/results/ticker_throughput.json.
"""

import argparse
import asyncio
import glob
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from _common import REPO, RESULTS, bench_topics, fingerprint, median, process_cpu_seconds
from _ticker_support import backend_cpu, cpu_spent, fresh_database, seed, server_version

from slotflow.contracts import CronSpec, IntervalSpec, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.pg.statements import compose
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings
from slotflow_ticker.claims import SlotFirer
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import CRON_RULES, Queries

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

#: Variants in the order they run and print.
VARIANTS = ("bare", "interval", "cron", "seconds", "published")
SECONDS_SPREAD = 30

_SEED_SECONDS = """
INSERT INTO ticker.schedules (schedule_id, definition, next_slot, next_fire_at, covered_until, cron_rules)
SELECT 's' || i, d.defs[1 + i % d.n], d.ats[1 + i % d.n], d.ats[1 + i % d.n],
       d.ats[1 + i % d.n] - interval '1 microsecond', {cron_rules}
  FROM generate_series(1, $1) AS i,
       (SELECT $2::json[] AS defs, $3::timestamptz[] AS ats, cardinality($2::json[]) AS n) AS d
"""


async def seed_seconds(pool: Pool, count: int) -> None:
    """``count`` schedules over `SECONDS_SPREAD` seconds crons, each with one slot due.

    Definition j is `S * * * * *` with S the second j + 1 seconds before the database's now, and
    that instant is the schedule's next slot: due, 1 to 30 s late (inside the 60 s misfire grace).
    """
    now: datetime = await pool.fetchval("SELECT now()")
    base = now.replace(microsecond=0)
    ats = [base - timedelta(seconds=j + 1) for j in range(SECONDS_SPREAD)]
    defs = [
        ScheduleDefinition(spec=CronSpec(expression=f"{at.second} * * * * *"), handler="bench.noop")
        for at in ats
    ]
    seed_seconds_sql = compose(_SEED_SECONDS, cron_rules=str(CRON_RULES))
    await pool.execute(seed_seconds_sql, count, [d.model_dump_json() for d in defs], ats)
    await pool.execute("VACUUM ANALYZE ticker.schedules")


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


def broker_cpu() -> float:
    """CPU seconds so far of the devstack's Kafka broker (0 when its pid file is not there)."""
    pid_file = REPO / ".devstack" / "kafka.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return process_cpu_seconds(pid)


def firer(pool: Pool, kafka: KafkaSettings, batch: int) -> SlotFirer:
    return SlotFirer(
        pool,
        schema="ticker",
        queries=Queries.for_schema("ticker"),
        events=EventFactory(Topics.of(kafka), source="ticker/bench"),
        metrics=TickerMetrics(),
        batch_size=batch,
        max_slots=1000,
    )


async def claim_until_idle(claim: SlotFirer, concurrency: int) -> int:
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
#: How long the relay published after the claims were done, ms.
TAIL_MS: dict[str, float] = {}


async def ticker_loop(
    pool: Pool,
    kafka: KafkaSettings,
    definition: ScheduleDefinition | None,
    count: int,
    batch: int,
    concurrency: int,
) -> float:
    """The claim loop over ``definition``'s schedules, or (None) the `seconds` variant's."""
    # One due slot per schedule: the interval's anchor, or the hour that began last (late but a
    # single missed slot, which fire_once fires), or a seconds cron's slot of a few seconds ago.
    if definition is None:
        kind = "seconds"
        await seed_seconds(pool, count)
    else:
        kind = definition.spec.kind
        first = "date_trunc('hour', now())"
        if isinstance(definition.spec, IntervalSpec):
            first = f"'{definition.spec.anchor.isoformat()}'::timestamptz"
        await seed(pool, count=count, definition=definition, first_fire=first)
    started, cpu, pg = time.perf_counter(), time.process_time(), await backend_cpu(pool)
    fired = await claim_until_idle(firer(pool, kafka, batch), concurrency)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if fired != count:
        raise SystemExit(f"ticker fired {fired} of {count}")
    CPU_US_PER_SLOT[kind] = cpu / fired * 1e6
    CPU_US_PER_SLOT[f"{kind} pg"] = cpu_spent(pg, await backend_cpu(pool)) / fired * 1e6
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
        pg, broker = await backend_cpu(pool), broker_cpu()
        started, cpu = time.perf_counter(), time.process_time()
        fired = await claim_until_idle(firer(pool, kafka, batch), concurrency)
        claimed = time.perf_counter()
        while await relay.pending():
            await asyncio.sleep(0.01)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        # How long the relay went on after the last claim: its backlog when claiming ended.
        TAIL_MS["published"] = (started + elapsed - claimed) * 1e3
        CPU_US_PER_SLOT["published pg"] = cpu_spent(pg, await backend_cpu(pool)) / count * 1e6
        CPU_US_PER_SLOT["published broker"] = (broker_cpu() - broker) / count * 1e6
        stop.set()
        await relaying
    if fired != count:
        raise SystemExit(f"ticker fired {fired} of {count}")
    # This process's CPU (claim and relay; aiokafka's sender runs on the same event loop).
    CPU_US_PER_SLOT["published"] = cpu / fired * 1e6
    return fired / elapsed


async def one_run(
    kafka: KafkaSettings, count: int, batch: int, concurrency: int, variants: list[str]
) -> dict[str, float]:
    result: dict[str, float] = {}
    wide = f"bare x{concurrency}"
    if "bare" in variants:
        async with fresh_database() as (_, pool):
            result["bare"] = await bare_loop(pool, count, batch, 1)
        async with fresh_database() as (_, pool):
            result[wide] = await bare_loop(pool, count, batch, concurrency)
        result["bare pg cpu us/slot"] = CPU_US_PER_SLOT["bare x1 pg"]
        result[f"{wide} pg cpu us/slot"] = CPU_US_PER_SLOT[f"bare x{concurrency} pg"]
    for key in ("interval", "cron", "seconds"):
        if key not in variants:
            continue
        definition = {
            "interval": interval_definition(datetime.now(UTC)),
            "cron": HOURLY,
            "seconds": None,
        }[key]
        async with fresh_database() as (_, pool):
            result[key] = await ticker_loop(pool, kafka, definition, count, batch, concurrency)
        result[f"{key} cpu us/slot"] = CPU_US_PER_SLOT[key]
        result[f"{key} pg cpu us/slot"] = CPU_US_PER_SLOT[f"{key} pg"]
    if "published" in variants:
        async with fresh_database() as (_, pool):
            result["published"] = await published_loop(pool, kafka, count, batch, concurrency)
        result["published cpu us/slot"] = CPU_US_PER_SLOT["published"]
        result["published pg cpu us/slot"] = CPU_US_PER_SLOT["published pg"]
        result["published broker cpu us/slot"] = CPU_US_PER_SLOT["published broker"]
        result["published relay tail ms"] = TAIL_MS["published"]
    if "bare" in variants:
        for key in ("interval", "cron", "seconds", "published"):
            if key in result:
                result[f"{key}/bare"] = result[key] / result["bare"]
                result[f"{key}/{wide}"] = result[key] / result[wide]
    return {k: round(v, 3 if "/" in k else 0) for k, v in result.items()}


async def topics_and_run(count: int, batch: int, concurrency: int, variants: list[str]) -> dict[str, float]:
    async with bench_topics() as kafka:
        return await one_run(kafka, count, batch, concurrency, variants)


def run_on(loop: str, count: int, batch: int, concurrency: int, variants: list[str]) -> dict[str, float]:
    """One run with the chosen variants (bare loops included) on the given event loop."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(topics_and_run(count, batch, concurrency, variants))
    return asyncio.run(topics_and_run(count, batch, concurrency, variants))


def parse_arm(text: str) -> tuple[str, dict[str, str]]:
    """`NAME[:CHECKOUT]`: the arm's name and the environment its child runs with."""
    name, _, checkout = text.partition(":")
    env: dict[str, str] = {}
    if checkout:
        root = os.path.abspath(checkout)
        # libs/*/src: the library, and slotflow-base where the checkout has it.
        paths = [f"{root}/services/ticker/src", *sorted(glob.glob(f"{root}/libs/*/src"))]
        env["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    return name, env


def run_arm(arm_env: dict[str, str], loop: str, args: argparse.Namespace) -> dict[str, float]:
    """One run in a child process importing the arm's sources; its result read from stdout."""
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--loops",
        loop,
        "--schedules",
        str(args.schedules),
        "--batch",
        str(args.batch),
        "--concurrency",
        str(args.concurrency),
        "--variants",
        ",".join(args.variants),
    ]
    out = subprocess.run(command, env={**os.environ, **arm_env}, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
    parser.add_argument(
        "--variants",
        type=lambda text: [v for v in text.split(",") if v],
        default=list(VARIANTS),
        help=f"comma-separated, of {','.join(VARIANTS)} (default all)",
    )
    parser.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME[:CHECKOUT]",
        help="compare arms in the same session, one run of each in turn (CHECKOUT: another "
        "checkout's ticker and library, e.g. the commit before a change)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")
    variants = [v for v in VARIANTS if v in args.variants]
    args.variants = variants
    if args.child:
        print(json.dumps(run_on(args.loops[0], args.schedules, args.batch, args.concurrency, variants)))
        return
    arms = [parse_arm(text) for text in args.arm]
    fingerprint_at_start = fingerprint(asyncio.run(server_version()))
    # A series per (event loop, arm): "asyncio", or "asyncio [before]" with arms.
    series = [(loop, name, env) for loop in args.loops for name, env in (arms or [("", {})])]
    label = {(loop, name): f"{loop} [{name}]" if name else loop for loop, name, _ in series}
    runs: dict[str, list[dict[str, float]]] = {label[(loop, name)]: [] for loop, name, _ in series}
    for i in range(args.runs):
        for loop, name, env in series:
            key = label[(loop, name)]
            load_before = os.getloadavg()[0]
            if arms:
                result = run_arm(env, loop, args)
            else:
                result = run_on(loop, args.schedules, args.batch, args.concurrency, variants)
            result["load_1m_start"] = round(load_before, 2)
            result["load_1m"] = round(os.getloadavg()[0], 2)
            runs[key].append(result)
            print(f"run {i + 1} ({key}): {result}", flush=True)
    summary = {
        key: {k: round(median([r[k] for r in results]), 3) for k in results[0]}
        for key, results in runs.items()
    }
    report = {
        "fingerprint": fingerprint_at_start,
        "schedules": args.schedules,
        "batch": args.batch,
        "variants": variants,
        "arms": dict(arms),
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
    rows = [wide if v == "bare" else v for v in variants]
    rows = (["bare"] if "bare" in variants else []) + rows
    print(f"| loop | event loop | slots/s (per run) | median slots/s | ratio to bare | ratio to {wide} |")
    print("|---|---|---|---:|---:|---:|")
    for key, results in runs.items():
        med = summary[key]
        for row in rows:
            if row == "bare":
                ratios = ("1", "")
            elif row == wide:
                ratios = ("", "1")
            elif f"{row}/bare" in med:
                ratios = (str(med[f"{row}/bare"]), str(med[f"{row}/{wide}"]))
            else:
                ratios = ("", "")
            per_run = " / ".join(f"{r[row]:,.0f}" for r in results)
            print(f"| {row} | {key} | {per_run} | {med[row]:,.0f} | {ratios[0]} | {ratios[1]} |")
    print("\nCPU per slot, µs (per run; median): this process (claim loop; published: claim and relay),")
    print("and the database backends; load average (1 min) at the end of each run")
    for key, results in runs.items():
        for cpu_key in [k for k in results[0] if k.endswith("cpu us/slot")]:
            per_run = " / ".join(f"{r[cpu_key]:.0f}" for r in results)
            print(
                f"- {key}, {cpu_key.removesuffix(' us/slot')}: {per_run}; median {summary[key][cpu_key]:.0f}"
            )
        if "published relay tail ms" in results[0]:
            tails = " / ".join(f"{r['published relay tail ms']:.0f}" for r in results)
            print(f"- {key}, published: relay still publishing after the last claim, ms: {tails}")
        print(f"- {key}, load: {' / '.join(str(r['load_1m']) for r in results)}")
    if arms and len(arms) >= 2:
        first = arms[0][0]
        for loop in args.loops:
            for name, _ in arms[1:]:
                print(f"\n{name} / {first}, {loop}, same round (per run; median):")
                base, other = runs[label[(loop, first)]], runs[label[(loop, name)]]
                for row in [v for v in variants if v != "bare"]:
                    same = [o[row] / b[row] for o, b in zip(other, base, strict=True)]
                    print(f"- {row}: {' / '.join(f'{x:.3f}' for x in same)}; median {median(same):.3f}")
    if not arms and len(runs) == 2 and "uvloop" in runs and "asyncio" in runs:
        print("\nuvloop / asyncio, same run (per run; median):")
        for row in [v for v in variants if v != "bare"]:
            same_run = [u[row] / a[row] for u, a in zip(runs["uvloop"], runs["asyncio"], strict=True)]
            print(f"- {row}: {' / '.join(f'{x:.2f}' for x in same_run)}; median {median(same_run):.2f}")


if __name__ == "__main__":
    main()
