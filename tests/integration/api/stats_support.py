"""The stats processor as a subprocess of its own environment (.venv-stats), and a known workload."""

import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from slotflow.testing.processes import ServiceProcess, free_port, stack_env

REPO = Path(__file__).resolve().parents[3]
STATS_PYTHON = REPO / ".venv-stats" / "bin" / "python"


def run_stats_probe(probe: str) -> str:
    """Run ``probe`` (Python source) in the stats environment, where faust lives; its stdout.
    Fails the test with the probe's stderr when it does not exit 0."""
    assert STATS_PYTHON.exists(), f"{STATS_PYTHON} is missing: run `make setup`"
    env = {**os.environ, "PYTHONPATH": str(REPO / "services" / "stats" / "src")}
    done = subprocess.run(
        [str(STATS_PYTHON), "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class StatsProcess(ServiceProcess):
    """`python -m slotflow_stats worker` from the stats environment, logging to a file."""

    def __init__(self, kafka: KafkaSettings, pg_dsn: str, workdir: Path, name: str = "stats") -> None:
        if not STATS_PYTHON.exists():
            raise AssertionError(
                f"{STATS_PYTHON} is missing: run `make setup` (it builds the stats environment)"
            )
        #: The worker's health listener (/livez, /readyz, /metrics).
        self.health_port = free_port()
        env = stack_env(
            kafka,
            pg_dsn,
            "SLOTFLOW_STATS_",
            data_dir=workdir / "faust",
            flush_interval_seconds=0.5,
            health_port=self.health_port,
            # A killed worker's replacement rejoins once the dead member's session ends: 10 s, not
            # the default minute, keeps the kill tests' waits short.
            session_timeout_seconds=10,
        )
        super().__init__(
            "slotflow_stats",
            name,
            env=env,
            log_dir=workdir,
            cwd=REPO,
            args=("worker",),
            python=STATS_PYTHON,
            # /metrics is on the health listener.
            metrics_port=self.health_port,
        )

    def log(self, chars: int = 6000) -> str:
        return super().log(chars)

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL: no flush, no commit, no goodbye; a worker is never restarted, so its log closes."""
        super().kill(timeout)
        self._log.close()

    def close(self) -> None:
        """SIGTERM: the worker flushes and commits, given up to 30 s (faust's shutdown is slow)."""
        self.stop(timeout=30.0)


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


@dataclass
class _Run:
    """One run's events into a workload, each counted where the stats processor counts it."""

    w: Workload
    job: str
    run_id: str
    common: dict[str, Any]
    #: The handler the run ran, counted under it too (family `handlers`); `~job` when its events
    #: do not name it.
    handler: str
    #: The family its job's windows are in: `runs` for a schedule, `workflows` for a workflow.
    family: str = "runs"

    def add(self, message: Message, suffix: str, at: datetime, counter: str) -> None:
        self.w.add(RUN_EVENTS, _env(message, id=f"{self.run_id}/{suffix}", key=self.job, at=at))
        self.w.count(self.family, self.job, at, counter)
        self.w.count("handlers", self.handler, at, counter)

    def started(self, attempt: int, at: datetime) -> None:
        self.add(
            RunStarted(**self.common, attempt=attempt, fence_token=attempt, started_at=at),
            f"{attempt}/s",
            at,
            "started",
        )

    def failed(self, attempt: int, at: datetime, error_type: str, *, retryable: bool) -> None:
        failed = RunFailed(
            **self.common,
            attempt=attempt,
            fence_token=attempt,
            error_type=error_type,
            message="x",
            retryable=retryable,
            finished_at=at,
        )
        self.add(failed, f"{attempt}/f", at, "failed")

    def completed(self, attempt: int, started: datetime, duration: timedelta) -> None:
        done = started + duration
        completed = RunCompleted(
            **self.common, attempt=attempt, fence_token=attempt, started_at=started, finished_at=done
        )
        self.add(completed, f"{attempt}/c", done, "completed")
        self.w.durations.setdefault(self.job, []).append(duration.total_seconds())


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
            common: dict[str, Any] = {"run_id": run_id, "job_id": job, "slot": slot, "owner": "c1"}
            w.add(
                JOBS_DUE,
                _env(JobDue(**common | {"handler": handler, "fire_at": slot}), id=run_id, key=job, at=slot),
            )
            w.count("runs", job, slot, "due")
            w.count("handlers", handler, slot, "due")
            # Its run events do not name the handler (as before run events carried it): the
            # worker counts them under the job (`~` and its id), which the api resolves to the
            # handler the job's newest JobDue named.
            run = _Run(w, job, run_id, common, "~" + job)
            started = slot + timedelta(seconds=1)
            run.started(1, started)
            duration = timedelta(milliseconds=40 * (k + 1) * (index + 1))
            if k % 4 == 0:
                failed = started + timedelta(milliseconds=500)
                run.failed(1, failed, "Boom", retryable=True)
                again = failed + timedelta(seconds=1)
                retrying = RunRetrying(
                    **common,
                    attempt=1,
                    fence_token=1,
                    next_attempt=2,
                    retry_at=again,
                    delay=timedelta(seconds=1),
                )
                run.add(retrying, "1/r", failed, "retried")
                run.started(2, again)
                run.completed(2, again, duration)
            elif k % 4 == 1:
                failed = started + timedelta(milliseconds=300)
                run.failed(1, failed, "Bad", retryable=False)
                dead = RunDeadLettered(**common, attempt=1, fence_token=1, reason="permanent_error")
                run.add(dead, "1/d", failed, "dead_lettered")
            else:
                run.completed(1, started, duration)
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


def handler_change_workload(base: datetime) -> Workload:
    """A schedule whose handler changed between two runs, and a workflow's activity run.

    `payouts` first ran `payments.capture` (dead-lettered), then was updated to `payments.void`
    (completed); `order-9` is a workflow whose activity ran `payments.authorize`. Each run event
    names the handler it ran, as the claimer writes them.
    """
    w = Workload(base)
    for offset, handler, ends in (
        (0, "payments.capture", "dead_lettered"),
        (30, "payments.void", "completed"),
    ):
        slot = base + timedelta(seconds=offset)
        rid = slot_run_id("payouts", slot)
        common: dict[str, Any] = {"run_id": rid, "job_id": "payouts", "slot": slot, "owner": "c1"}
        w.add(
            JOBS_DUE,
            _env(JobDue(**common | {"handler": handler, "fire_at": slot}), id=rid, key="payouts", at=slot),
        )
        w.count("runs", "payouts", slot, "due")
        w.count("handlers", handler, slot, "due")
        run = _Run(w, "payouts", rid, common | {"handler": handler}, handler)
        started = slot + timedelta(seconds=1)
        run.started(1, started)
        if ends == "completed":
            run.completed(1, started, timedelta(milliseconds=200))
        else:
            failed = started + timedelta(milliseconds=300)
            run.failed(1, failed, "Declined", retryable=False)
            dead = RunDeadLettered(
                **common, handler=handler, attempt=1, fence_token=1, reason="permanent_error"
            )
            run.add(dead, "1/d", failed, "dead_lettered")
    slot = base + timedelta(seconds=10)
    activity: dict[str, Any] = {
        "run_id": "order-9/2",
        "job_id": "order-9",
        "slot": slot,
        "owner": "c1",
        "workflow_id": "order-9",
        "sequence": 2,
    }
    due = JobDue(**activity | {"handler": "payments.authorize", "kind": "activity"})
    w.add(JOBS_DUE, _env(due, id="order-9/2#1", key="order-9", at=slot))
    w.count("workflows", "order-9", slot, "due")
    w.count("handlers", "payments.authorize", slot, "due")
    run = _Run(
        w,
        "order-9",
        "order-9/2",
        activity | {"handler": "payments.authorize"},
        "payments.authorize",
        "workflows",
    )
    run.started(1, slot + timedelta(seconds=1))
    run.completed(1, slot + timedelta(seconds=1), timedelta(milliseconds=100))
    return w
