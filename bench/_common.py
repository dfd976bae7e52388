"""What every benchmark shares: scratch databases and topic namespaces, CPU readings, a fingerprint.

Each benchmark runs in a database and a topic namespace of its own, dropped afterwards, so it
neither sees nor disturbs what else runs on the devstack.
"""

import os
import platform
import statistics
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import asyncpg

from slotflow.contracts import HistoryEvent, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.settings import KafkaSettings, PostgresSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointed at ``database`` (query parameters kept)."""
    # The query first: it may hold paths (sslrootcert=/etc/...) whose slashes are not the path's.
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


@asynccontextmanager
async def scratch_database() -> AsyncIterator[str]:
    """The DSN of a new, empty database on the configured server; dropped afterwards."""
    admin_dsn = PostgresSettings().dsn
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(admin_dsn, name)
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@asynccontextmanager
async def bench_topics() -> AsyncIterator[KafkaSettings]:
    """Every topic of the table (real partition counts) in a fresh namespace; deleted afterwards."""
    from aiokafka.admin import AIOKafkaAdminClient

    settings = KafkaSettings().model_copy(update={"topic_namespace": f"bench_{uuid.uuid4().hex[:10]}"})
    await ensure_topics(settings.bootstrap, settings.topics())
    try:
        yield settings
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([spec.name for spec in settings.topics()])
        finally:
            await admin.close()


async def publish_histories(
    kafka: KafkaSettings, histories: Iterable[Sequence[HistoryEvent]], *, at: datetime, client_id: str
) -> int:
    """Write each workflow's history to the history topic as the orchestrator's relay would (one
    envelope per event, keyed by the workflow id, id `{workflow_id}#{sequence}`); the events written."""
    topic = kafka.topic(WORKFLOW_HISTORY)
    events = 0
    async with Producer(kafka, client_id=client_id) as producer:
        batch: list[OutgoingRecord] = []
        for history in histories:
            for event in history:
                workflow_id = event.workflow_id
                envelope = wrap(
                    event,
                    id=f"{workflow_id}#{event.sequence}",
                    key=workflow_id,
                    source="bench",
                    occurred_at=at,
                )
                headers = {"slotflow-type": event.message_type.encode(), "slotflow-version": b"1"}
                batch.append(OutgoingRecord(topic, workflow_id.encode(), encode(envelope), headers))
                events += 1
            if len(batch) >= 5000:
                await producer.send_raw_all(batch)
                batch = []
        if batch:
            await producer.send_raw_all(batch)
    return events


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (from /proc); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def fingerprint(server_version: str | None = None) -> dict[str, object]:
    """The machine and its load when a benchmark starts, written beside its figures."""
    kernel = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": kernel,
        "postgres": server_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "when": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values)
