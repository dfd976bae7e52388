"""Takeover time after SIGKILL of the claimer running a run, against the lease TTL.

Two claimer processes share the JobDue topic. Each trial publishes one run whose handler holds
its first claim; the claimer holding it is killed with SIGKILL; the survivor's reaper takes the
run over (token 2) once the lease has expired by the database clock. Takeover time is the
database-clock interval from just after the kill to the takeover's `started_at`. The killed
claimer is restarted before the next trial, so every trial starts from two live claimers.

Theoretical bound: the lease was renewed at most one heartbeat interval (TTL / 3) before the kill,
so it expires within TTL of the kill; the reaper polls every min(1 s, TTL / 4). Target: at most
TTL + 2 s.

    .venv/bin/python bench/claimer_takeover.py --trials 10 --lease-ttl 5
"""

import argparse
import asyncio
import json
import signal
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import RESULTS, bench_topics, fingerprint
from claimer_support import ClaimerProcess, fresh_database

from slotflow.contracts import JobDue
from slotflow.contracts.topics import JOBS_DUE
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow_claimer.events import job_due_envelope


async def wait_for(pool: Pool, query: str, *args: object, timeout: float = 120.0) -> object:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = await pool.fetchval(query, *args)
        if value is not None:
            return value
        await asyncio.sleep(0.02)
    raise SystemExit(f"timed out waiting for: {query}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(fingerprint()))
    ttl = args.lease_ttl
    times: list[float] = []
    with tempfile.TemporaryDirectory() as logs:
        async with (
            bench_topics() as kafka,
            fresh_database() as (dsn, pool),
            Producer(kafka, client_id="bench") as feed,
        ):
            names = ["bench-claimer-a", "bench-claimer-b"]
            procs = {
                name: ClaimerProcess(name, kafka, dsn, Path(logs), lease_ttl_seconds=ttl) for name in names
            }
            try:
                for proc in procs.values():
                    await proc.wait_ready()
                for trial in range(args.trials):
                    slot = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=trial)
                    job = JobDue(
                        run_id=run_id(f"takeover-{trial}", slot),
                        job_id=f"takeover-{trial}",
                        slot=slot,
                        handler="bench.hold_first_claim",
                    )
                    await feed.send(kafka.topic(JOBS_DUE), job_due_envelope(job, at=datetime.now(UTC)))
                    owner = str(
                        await wait_for(
                            pool,
                            "SELECT owner FROM claimer.runs WHERE run_id = $1 AND fence_token = 1",
                            job.run_id,
                        )
                    )
                    procs[owner].stop(signal.SIGKILL)
                    killed_at = await pool.fetchval("SELECT now()")
                    taken_at = await wait_for(
                        pool,
                        "SELECT started_at FROM claimer.runs WHERE run_id = $1 AND fence_token = 2",
                        job.run_id,
                    )
                    if not isinstance(taken_at, datetime):
                        raise SystemExit("unexpected started_at")
                    seconds = (taken_at - killed_at).total_seconds()
                    times.append(seconds)
                    print(f"trial {trial + 1}: killed {owner}, taken over after {seconds:.2f} s", flush=True)
                    procs[owner] = ClaimerProcess(owner, kafka, dsn, Path(logs), lease_ttl_seconds=ttl)
                    await procs[owner].wait_ready()
            finally:
                for proc in procs.values():
                    proc.stop()
    ordered = sorted(times)
    summary = {
        "lease_ttl_s": ttl,
        "target_s": ttl + 2.0,
        "median_s": statistics.median(times),
        "p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max_s": max(times),
        "median_over_ttl": statistics.median(times) / ttl,
        "max_over_target": max(times) / (ttl + 2.0),
    }
    print("summary: " + ", ".join(f"{k} {v:.2f}" for k, v in summary.items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "claimer_takeover.json").write_text(
        json.dumps(
            {"args": vars(args), "fingerprint": fingerprint(), "trials_s": times, "summary": summary},
            indent=2,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
