"""Dead letters parked per second by the DLQ service: a poll in one transaction vs one per letter.

    .venv/bin/python bench/dlq_parking.py [--letters 5000] [--runs 3]

Each run: a fresh topic namespace and database; `--letters` dead letters (a 200-byte origin value
each, as ConsumeLoop would send them) are produced to the DLQ topic first, then a DLQ service starts
in-process; the clock runs from the first letter recorded in its inbox (parked, status event staged)
to the last, so start-up is not counted. Measured one after the other in the same run:

- batch:      the service as it ships (ConsumeLoop's batch_handler: one transaction per poll),
- one-by-one: the same service with every letter parked in its own transaction (its slow path).

Figures are letters/s and the batch / one-by-one ratio from the same run; medians over runs.
Results: stdout (Markdown) and bench/results/dlq_parking.json.
"""

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
import uuid
from datetime import UTC, datetime

import asyncpg
from _common import RESULTS, scratch_database

from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.errors import InvalidPayload
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.loop import Incoming
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_dlq.app import DlqService
from slotflow_dlq.config import DlqSettings, Settings

AT = datetime(2026, 12, 2, tzinfo=UTC)


class OneByOne(DlqService):
    """The service with its fast path turned into the slow path: one transaction per letter."""

    async def _on_letters(self, batch: list[Incoming]) -> None:
        for incoming in batch:
            await self._on_letter(incoming)


async def measure(kind: type[DlqService], letters: int) -> float:
    kafka = KafkaSettings(topic_namespace=f"bench_{uuid.uuid4().hex[:10]}")
    specs = [s.model_copy(update={"partitions": min(s.partitions, 3)}) for s in kafka.topics()]
    await ensure_topics(kafka.bootstrap, specs)
    topic = kafka.topic(DLQ_MESSAGES)
    async with Producer(kafka, client_id="bench-feed", linger_ms=20) as feed:
        batch = []
        for n in range(letters):
            origin = Record("bench.origin", n % 3, n, b"k%d" % (n % 97), b"x" * 200, (), None)
            batch.append(
                (
                    topic,
                    dead_letter_envelope(origin, InvalidPayload("x"), source_service="bench", occurred_at=AT),
                )
            )
        await feed.send_many(batch)
    async with scratch_database() as dsn:
        service = kind(
            Settings(
                dlq=DlqSettings(metrics_port=0, max_poll_records=500),
                kafka=kafka,
                postgres=PostgresSettings(dsn=dsn),
            )
        )
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        conn = await asyncpg.connect(dsn)
        try:
            # The clock starts with the first letter parked: start-up (migrations, joining the
            # consumer group) is not what is measured.
            first: tuple[float, int] | None = None
            while True:
                await asyncio.sleep(0.02)
                try:
                    done = int(await conn.fetchval("SELECT count(*) FROM dlq.inbox"))
                except asyncpg.UndefinedTableError:
                    continue
                if first is None and done > 0:
                    first = (time.perf_counter(), done)
                if done >= letters:
                    break
                if task.done():
                    await task
            if first is None:
                raise RuntimeError("nothing was parked")
            elapsed = time.perf_counter() - first[0]
            counted = letters - first[1]
        finally:
            await conn.close()
            stop.set()
            await task
    return counted / elapsed


def fingerprint() -> dict[str, object]:
    return {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--letters", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for run in range(1, args.runs + 1):
        batch = await measure(DlqService, args.letters)
        single = await measure(OneByOne, args.letters)
        rows.append({"run": run, "batch": batch, "one_by_one": single, "ratio": batch / single})
        print(
            f"run {run}: batch {batch:.0f}/s, one-by-one {single:.0f}/s, ratio {batch / single:.2f}",
            flush=True,
        )
    med = {k: statistics.median(r[k] for r in rows) for k in ("batch", "one_by_one", "ratio")}
    print("\n| run | batch letters/s | one-by-one letters/s | ratio |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['batch']:.0f} | {r['one_by_one']:.0f} | {r['ratio']:.2f} |")
    print(f"| median | {med['batch']:.0f} | {med['one_by_one']:.0f} | {med['ratio']:.2f} |")
    info = fingerprint()
    print(f"\n{info}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dlq_parking.json").write_text(
        json.dumps({"letters": args.letters, "runs": rows, "median": med, "machine": info}, indent=2) + "\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
