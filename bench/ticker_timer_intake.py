"""StartTimer intake: timers stored per second, one transaction per command versus one per batch.

    .venv/bin/python bench/ticker_timer_intake.py [--timers 5000] [--runs 3] [--cap-seconds 30]

Each run and mode gets a fresh database and topic namespace. The StartTimer commands (due in an
hour, so nothing fires during the measurement) are published first, as the retry storm of a
claimer would leave them; then `python -m slotflow_ticker` starts as its own process with
`SLOTFLOW_TICKER_COMMAND_BATCHING` on or off and works through the backlog. The rate comes from the
database itself: stored timers over the span between the first and the last `created_at` (each
transaction's `now()`), so neither the consumer group join nor polling enters the figure. The
per-command mode is stopped after --cap-seconds; its rate is what it stored by then.

Results: stdout (Markdown) and bench/results/ticker_timer_intake.json.
"""

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta

from _common import RESULTS, bench_topics, fingerprint, median
from _ticker_support import fresh_database, server_version

from slotflow.contracts import FireTimerFired, StartTimer
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.contracts.timers import sleep_timer_id
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings


async def publish(kafka: KafkaSettings, pool: Pool, count: int) -> None:
    now = await pool.fetchval("SELECT now()")
    records = []
    for i in range(count):
        # A workflow sleep's id and action (the ticker refuses an id that does not fit its action).
        message = StartTimer(
            timer_id=sleep_timer_id(f"wf-{i}", i),
            fire_at=now + timedelta(hours=1),
            on_fire=FireTimerFired(owner=f"wf-{i}", sequence=i),
        )
        spec, envelope = build_command(message, source="bench")
        records.append(
            OutgoingRecord(
                kafka.topic(spec), envelope.key.encode(), encode(envelope), envelope_headers(envelope)
            )
        )
    async with Producer(kafka, client_id="bench-intake") as producer:
        await producer.send_raw_many(records)


async def one_run(batching: bool, count: int, cap_seconds: float) -> dict[str, object]:
    async with bench_topics() as kafka, fresh_database() as (dsn, pool):
        await publish(kafka, pool, count)
        env = {
            **os.environ,
            "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
            "SLOTFLOW_PG_DSN": dsn,
            "SLOTFLOW_TICKER_TICKER_ID": f"bench-{uuid.uuid4().hex[:6]}",
            "SLOTFLOW_TICKER_METRICS_PORT": "0",
            "SLOTFLOW_TICKER_COMMAND_BATCHING": "true" if batching else "false",
        }
        ticker = subprocess.Popen(
            [sys.executable, "-m", "slotflow_ticker", "--log-level", "WARNING", "run"], env=env
        )
        try:
            first_seen: float | None = None
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                stored = await pool.fetchval("SELECT count(*) FROM ticker.timers")
                if stored and first_seen is None:
                    first_seen = time.monotonic()
                if stored >= count or (
                    first_seen is not None and time.monotonic() - first_seen > cap_seconds
                ):
                    break
                await asyncio.sleep(0.2)
        finally:
            ticker.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                ticker.wait(timeout=60)
            if ticker.poll() is None:
                ticker.kill()
        row = await pool.fetchrow(
            "SELECT count(*) AS n, count(DISTINCT created_at) AS tx,"
            " extract(epoch FROM max(created_at) - min(created_at)) AS span FROM ticker.timers"
        )
    assert row is not None  # an aggregate always returns its one row
    stored, span = int(row["n"]), float(row["span"] or 0.0)
    return {
        "mode": "batch" if batching else "per command",
        "published": count,
        "stored": stored,
        "transactions": int(row["tx"]),
        "span_s": round(span, 3),
        "timers_per_s": round((stored - 1) / span, 1) if span > 0 else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cap-seconds", type=float, default=30.0)
    args = parser.parse_args()
    report: dict[str, object] = {"fingerprint": fingerprint(await server_version()), "runs": []}
    rows: list[tuple[dict[str, object], dict[str, object], float]] = []
    for i in range(args.runs):
        before = await one_run(False, args.timers, args.cap_seconds)
        after = await one_run(True, args.timers, args.cap_seconds)
        ratio = float(after["timers_per_s"]) / float(before["timers_per_s"])  # type: ignore[arg-type]
        rows.append((before, after, ratio))
        report["runs"].append({"per_command": before, "batch": after, "ratio": round(ratio, 1)})  # type: ignore[attr-defined]
        print(f"run {i + 1}: {before} | {after} | ratio {ratio:.1f}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ticker_timer_intake.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\nfingerprint: {json.dumps(report['fingerprint'])}")
    print("| mode | timers stored/s (runs) | median | transactions (runs) |")
    print("|---|---|---:|---|")
    modes = (
        ([r[0] for r in rows], "one transaction per command"),
        ([r[1] for r in rows], "one transaction per polled batch"),
    )
    for results, name in modes:
        rates = [float(r["timers_per_s"]) for r in results]  # type: ignore[arg-type]
        txs = [str(r["transactions"]) for r in results]
        print(
            f"| {name} | {' / '.join(f'{x:,.0f}' for x in rates)} | {median(rates):,.0f} | {' / '.join(txs)} |"
        )
    ratios = [r[2] for r in rows]
    print(
        f"\nratio batch / per command (same run): {' / '.join(f'{x:.1f}' for x in ratios)}, median {median(ratios):.1f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
