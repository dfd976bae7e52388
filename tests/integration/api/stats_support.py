"""The stats processor as a subprocess of its own environment (.venv-stats), and a known workload."""

import os
import signal
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import asyncpg

from slotflow.contracts import (
    DeadLetterStatusChanged,
    Envelope,
    JobDue,
    Message,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunStarted,
    SlotSkipped,
    wrap,
)
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS, TopicSpec
from slotflow.core.identity import run_id as slot_run_id
from slotflow.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[3]
STATS_PYTHON = REPO / ".venv-stats" / "bin" / "python"


class StatsProcess:
    """`python -m slotflow_stats worker` from the stats environment, logging to a file."""

    def __init__(self, kafka: KafkaSettings, pg_dsn: str, workdir: Path, name: str = "stats") -> None:
        if not STATS_PYTHON.exists():
            raise AssertionError(
                f"{STATS_PYTHON} is missing: run `make setup` (it builds the stats environment)"
            )
        self.log_path = workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update(
            {
                "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
                "SLOTFLOW_PG_DSN": pg_dsn,
                "SLOTFLOW_STATS_DATA_DIR": str(workdir / "faust"),
                "SLOTFLOW_STATS_FLUSH_INTERVAL_SECONDS": "0.5",
            }
        )
        self._log: IO[bytes] = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(STATS_PYTHON), "-m", "slotflow_stats", "worker"],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=self._log,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        """SIGKILL: no flush, no commit, no goodbye."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def close(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self._log.closed:
            self._log.close()


async def stored_counts(dsn: str, size_s: int = 60) -> dict[tuple[str, str, datetime, str], int]:
    """(family, subject, window start, counter) -> count, summed over partitions, from the sink."""
    conn = await asyncpg.connect(dsn)
    try:
        exists = await conn.fetchval("SELECT to_regclass('stats.windows') IS NOT NULL")
        if not exists:
            return {}
        rows = await conn.fetch(
            "SELECT family, subject, window_start, c.key AS counter, sum(c.value::bigint) AS n "
            "FROM stats.windows, jsonb_each_text(counts) c WHERE size_s = $1 "
            "GROUP BY family, subject, window_start, c.key",
            size_s,
        )
    finally:
        await conn.close()
    return {(r["family"], r["subject"], r["window_start"], r["counter"]): int(r["n"]) for r in rows}


@dataclass
class Workload:
    """Events the claimer, ticker and dlq would publish, with the counts they must produce."""

    base: datetime
    records: list[tuple[TopicSpec, Envelope]] = field(default_factory=list)
    expected: Counter[tuple[str, str, datetime, str]] = field(default_factory=Counter)
    durations: dict[str, list[float]] = field(default_factory=dict)

    def add(self, spec: TopicSpec, envelope: Envelope) -> None:
        self.records.append((spec, envelope))

    def count(self, family: str, subject: str, at: datetime, counter: str) -> None:
        start = at.replace(second=0, microsecond=0)
        self.expected[(family, subject, start, counter)] += 1

    def topics(self, kafka: KafkaSettings) -> list[tuple[str, Envelope]]:
        return [(kafka.topic(spec), envelope) for spec, envelope in self.records]


HANDLERS = {"stats-a": "h.alpha", "stats-b": "h.alpha", "stats-c": "h.beta"}


def _env(message: Message, *, id: str, key: str, at: datetime) -> Envelope:
    return wrap(message, id=id, key=key, source="test", occurred_at=at)


def workload(base: datetime, *, runs_per_schedule: int = 12) -> Workload:
    """Runs every 10 s from ``base`` (a whole minute) for each schedule of HANDLERS.

    Every fourth run fails once and succeeds on retry, every fourth (offset one) fails for good and
    is dead-lettered, the rest complete; durations differ per run. Plus a skipped slot and parked
    poison on two topics. Run ids follow the identity rule (the consumers park any other).
    """
    w = Workload(base)
    for index, (job, handler) in enumerate(HANDLERS.items()):
        for k in range(runs_per_schedule):
            slot = base + timedelta(seconds=10 * k)
            run_id = slot_run_id(job, slot)
            common = {"run_id": run_id, "job_id": job, "slot": slot, "owner": "c1"}
            w.add(
                JOBS_DUE,
                _env(JobDue(**common | {"handler": handler, "fire_at": slot}), id=run_id, key=job, at=slot),
            )
            w.count("runs", job, slot, "due")
            started = slot + timedelta(seconds=1)
            w.add(
                RUN_EVENTS,
                _env(
                    RunStarted(**common, attempt=1, fence_token=1, started_at=started),
                    id=f"{run_id}/1/s",
                    key=job,
                    at=started,
                ),
            )
            w.count("runs", job, started, "started")
            duration = timedelta(milliseconds=40 * (k + 1) * (index + 1))
            if k % 4 == 0:
                failed = started + timedelta(milliseconds=500)
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunFailed(
                            **common,
                            attempt=1,
                            fence_token=1,
                            error_type="Boom",
                            message="x",
                            retryable=True,
                            finished_at=failed,
                        ),
                        id=f"{run_id}/1/f",
                        key=job,
                        at=failed,
                    ),
                )
                w.count("runs", job, failed, "failed")
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunRetrying(
                            **common,
                            attempt=1,
                            fence_token=1,
                            next_attempt=2,
                            retry_at=failed + timedelta(seconds=1),
                            delay=timedelta(seconds=1),
                        ),
                        id=f"{run_id}/1/r",
                        key=job,
                        at=failed,
                    ),
                )
                w.count("runs", job, failed, "retried")
                again = failed + timedelta(seconds=1)
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunStarted(**common, attempt=2, fence_token=2, started_at=again),
                        id=f"{run_id}/2/s",
                        key=job,
                        at=again,
                    ),
                )
                w.count("runs", job, again, "started")
                done = again + duration
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunCompleted(**common, attempt=2, fence_token=2, started_at=again, finished_at=done),
                        id=f"{run_id}/2/c",
                        key=job,
                        at=done,
                    ),
                )
                w.count("runs", job, done, "completed")
                w.durations.setdefault(job, []).append(duration.total_seconds())
            elif k % 4 == 1:
                failed = started + timedelta(milliseconds=300)
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunFailed(
                            **common,
                            attempt=1,
                            fence_token=1,
                            error_type="Bad",
                            message="x",
                            retryable=False,
                            finished_at=failed,
                        ),
                        id=f"{run_id}/1/f",
                        key=job,
                        at=failed,
                    ),
                )
                w.count("runs", job, failed, "failed")
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunDeadLettered(**common, attempt=1, fence_token=1, reason="permanent_error"),
                        id=f"{run_id}/1/d",
                        key=job,
                        at=failed,
                    ),
                )
                w.count("runs", job, failed, "dead_lettered")
            else:
                done = started + duration
                w.add(
                    RUN_EVENTS,
                    _env(
                        RunCompleted(
                            **common, attempt=1, fence_token=1, started_at=started, finished_at=done
                        ),
                        id=f"{run_id}/1/c",
                        key=job,
                        at=done,
                    ),
                )
                w.count("runs", job, done, "completed")
                w.durations.setdefault(job, []).append(duration.total_seconds())
    skipped_slot = base + timedelta(seconds=5)
    w.add(
        SCHEDULE_EVENTS,
        _env(
            SlotSkipped(
                schedule_id="stats-c",
                run_id=slot_run_id("stats-c", skipped_slot),
                slot=skipped_slot,
                reason="misfire",
            ),
            id=f"skip-{skipped_slot.isoformat()}",
            key="stats-c",
            at=skipped_slot,
        ),
    )
    w.count("schedules", "stats-c", skipped_slot, "slots_skipped")
    for i, topic in enumerate(["t.orders", "t.orders", "t.orders", "t.payments", "t.payments"]):
        at = base + timedelta(seconds=20 * i)
        dl_id = f"{topic}:0:{i}"
        w.add(
            DLQ_EVENTS,
            _env(
                DeadLetterStatusChanged(
                    dead_letter_id=dl_id,
                    status="parked",
                    reason="undecodable",
                    topic=topic,
                    source_service="api",
                    at=at,
                ),
                id=f"{dl_id}/parked",
                key=dl_id,
                at=at,
            ),
        )
        w.count("dlq", topic, at, "parked")
    return w


def past_minute(minutes_ago: int = 10) -> datetime:
    """A whole minute ``minutes_ago`` back: its windows are closed while the test runs."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - timedelta(minutes=minutes_ago)
