"""The retry storm with and without retry budgets and circuit breakers, as ratios in one run.

Two arms, each on a fresh database and topic namespace, one after the other in the same process,
with the same workload: JOBS runs of one handler that calls a dependency which is down for
OUTAGE seconds from the first call and then recovers. Real path: claimers in-process (two by
default, separate ClaimerService instances), the ticker in-process for retry timers, real Kafka and
PostgreSQL.

- `jitter`: the handler declares no downstream; failures retry with full jitter
  (`--base`, `--cap`, enough attempts that nothing is dead-lettered by the outage alone).
- `budget`: the same handler declares the downstream `bank-api`; the claimers' default retry
  budget and circuit breaker (or `--cooldown`/`--window`) apply.

Reported per arm: calls that reached the dependency during the outage (total, per second, peak in
any one second, and the repeat calls: a run's second and later calls, the storm itself), runs
dead-lettered, the time to drain after recovery (recovery to the last run completed) and, with
budgets, when the breaker closed after the recovery; then budget / jitter ratios. Every run must
complete exactly once.

    .venv/bin/python bench/claimer_retry_budget.py --jobs 600 --outage 30 --runs 1
"""

import argparse
import asyncio
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import RESULTS, bench_topics, fingerprint, median, scratch_database

from slotflow.contracts import JobDue, RetryPolicy
from slotflow.contracts.topics import JOBS_DUE
from slotflow.core.identity import run_id
from slotflow.errors import DownstreamUnavailable
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import create_pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import ClaimerSettings, Settings
from slotflow_claimer.events import job_due_envelope
from slotflow_ticker.app import TickerService
from slotflow_ticker.config import Settings as TickerServiceSettings
from slotflow_ticker.config import TickerSettings

SLOT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


@dataclass
class Bank:
    """The dependency: down for ``outage`` seconds from its first call; records every call."""

    outage: float
    first_call: float | None = None
    #: The wall clock at the first call (the database's now() is this host's clock too).
    first_call_wall: float | None = None
    calls: list[tuple[str, float, bool]] = field(default_factory=list)

    def down(self, now: float) -> bool:
        if self.first_call is None:
            self.first_call = now
            self.first_call_wall = time.time()
        return now - self.first_call < self.outage

    async def __call__(self, ctx: RunContext) -> dict[str, str]:
        now = time.monotonic()
        ok = not self.down(now)
        self.calls.append((ctx.run_id, now, ok))
        if not ok:
            raise DownstreamUnavailable("bank-api", "bank-api answered 503 (simulated outage)")
        return {"paid": ctx.run_id}


async def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    bank = Bank(outage=args.outage)
    registry = HandlerRegistry()
    registry.register("bench.bank", bank, downstreams=["bank-api"] if arm == "budget" else ())
    policy = RetryPolicy(
        base=timedelta(seconds=args.base), cap=timedelta(seconds=args.cap), max_attempts=args.max_attempts
    )
    overrides: dict[str, Any] = {"max_in_flight": 256, "lease_ttl_seconds": 15.0}
    if args.cooldown is not None:
        overrides["downstream_cooldown_seconds"] = args.cooldown
    if args.window is not None:
        overrides["downstream_window_seconds"] = args.window
    async with scratch_database() as dsn, bench_topics() as kafka:
        postgres = PostgresSettings(dsn=dsn, pool_min_size=1, pool_max_size=10)
        ticker = TickerService(
            TickerServiceSettings(
                ticker=TickerSettings(ticker_id=f"bench-{arm}", metrics_port=0),
                kafka=kafka,
                postgres=postgres,
            )
        )
        stop_ticker = asyncio.Event()
        ticker_task = asyncio.create_task(ticker.run(stop_ticker))
        await asyncio.wait_for(ticker.started.wait(), timeout=60)
        claimers = [
            ClaimerService(
                Settings(claimer=ClaimerSettings(**overrides), kafka=kafka, postgres=postgres),
                registry=registry,
            )
            for _ in range(args.claimers)
        ]
        for claimer in claimers:
            await claimer.start()
        await asyncio.sleep(3.0)  # the consumer group settles before the work arrives
        pool = await create_pool(postgres, min_size=1, max_size=2)
        try:
            await publish(kafka, args.jobs, policy)
            while bank.first_call is None:
                await asyncio.sleep(0.05)
            recovered_at = bank.first_call + args.outage
            deadline = recovered_at + args.timeout
            while time.monotonic() < deadline:
                ended = await pool.fetchval(
                    "SELECT count(*) FROM claimer.runs WHERE state IN ('completed', 'dead_lettered')"
                )
                if ended == args.jobs:
                    break
                await asyncio.sleep(0.2)
            rows = await pool.fetch("SELECT state, count(*) AS n FROM claimer.runs GROUP BY state")
            states: dict[str, int] = {row["state"]: row["n"] for row in rows}
            # Where the drain's time goes: when the breaker closed after the recovery.
            recovered_wall = (bank.first_call_wall or 0.0) + args.outage
            closes = await pool.fetch(
                "SELECT extract(epoch FROM at)::float8 AS at, cause FROM claimer.downstream_changes "
                "WHERE to_state = 'closed' ORDER BY id"
            )
            closed_after = [row["at"] - recovered_wall for row in closes if row["at"] >= recovered_wall]
            changes = await pool.fetchval("SELECT count(*) FROM claimer.downstream_changes")
        finally:
            await pool.close()
            for claimer in claimers:
                await claimer.stop(grace=1.0)
            stop_ticker.set()
            await asyncio.wait_for(ticker_task, timeout=60)
    outage_calls = [at for _, at, ok in bank.calls if at < recovered_at]
    # A run's second and later calls during the outage: the retry storm itself.
    repeat_calls = len(outage_calls) - len({rid for rid, at, _ in bank.calls if at < recovered_at})
    per_second = Counter(math.floor(at - (bank.first_call or 0.0)) for at in outage_calls)
    successes = Counter(rid for rid, _, ok in bank.calls if ok)
    last_success = max((at for _, at, ok in bank.calls if ok), default=math.nan)
    return {
        "arm": arm,
        "outage_calls": len(outage_calls),
        "outage_calls_per_second": len(outage_calls) / args.outage,
        "peak_calls_in_one_second": max(per_second.values(), default=0),
        "repeat_calls_during_outage": repeat_calls,
        "drain_after_recovery_s": last_success - recovered_at,
        "breaker_closed_after_recovery_s": closed_after[0] if closed_after else None,
        "breaker_changes": changes,
        "completed": states.get("completed", 0),
        "dead_lettered": states.get("dead_lettered", 0),
        "completed_more_than_once": sum(1 for n in successes.values() if n > 1),
    }


async def publish(kafka: KafkaSettings, jobs: int, policy: RetryPolicy) -> None:
    async with Producer(kafka, client_id="bench-feed") as producer:
        now = datetime.now(UTC)
        topic = kafka.topic(JOBS_DUE)
        envelopes = []
        for i in range(jobs):
            job_id = f"pay-{i:05d}"
            job = JobDue(
                run_id=run_id(job_id, SLOT),
                job_id=job_id,
                slot=SLOT,
                attempt=1,
                kind="scheduled",
                handler="bench.bank",
                payload={"merchant_id": job_id},
                retry=policy,
            )
            envelopes.append((topic, job_due_envelope(job, at=now)))
        await producer.send_many(envelopes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the dependency is down")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument("--base", type=float, default=0.5, help="jitter base, seconds")
    parser.add_argument("--cap", type=float, default=5.0, help="jitter cap, seconds")
    parser.add_argument("--max-attempts", type=int, default=100)
    parser.add_argument(
        "--cooldown", type=float, default=None, help="breaker cool-down (default: the claimers')"
    )
    parser.add_argument("--window", type=float, default=None, help="budget window (default: the claimers')")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds after recovery to wait")
    args = parser.parse_args()
    print(json.dumps(fingerprint()))
    rounds: list[dict[str, dict[str, Any]]] = []
    for n in range(args.runs):
        jitter = asyncio.run(run_arm("jitter", args))
        budget = asyncio.run(run_arm("budget", args))
        ratios = {
            "calls_per_second": budget["outage_calls_per_second"]
            / max(jitter["outage_calls_per_second"], 1e-9),
            "peak_calls_in_one_second": budget["peak_calls_in_one_second"]
            / max(jitter["peak_calls_in_one_second"], 1),
            "repeat_calls": budget["repeat_calls_during_outage"]
            / max(jitter["repeat_calls_during_outage"], 1),
            "drain_after_recovery": budget["drain_after_recovery_s"]
            / max(jitter["drain_after_recovery_s"], 1e-9),
        }
        rounds.append({"jitter": jitter, "budget": budget, "ratios": ratios})
        print(json.dumps({"run": n + 1, **rounds[-1]}))
    summary = {
        name: median([r["ratios"][name] for r in rounds])
        for name in ("calls_per_second", "peak_calls_in_one_second", "repeat_calls", "drain_after_recovery")
    }
    print(json.dumps({"median_ratios_budget_over_jitter": summary}))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "claimer_retry_budget.json").write_text(
        json.dumps(
            {"args": vars(args), "fingerprint": fingerprint(), "rounds": rounds, "summary": summary}, indent=2
        )
    )


if __name__ == "__main__":
    main()
