"""The hostile values (`slotflow.testing.badinput.hostile_values`) placed in the records the stats
worker reads, each with the verdict of the message models, written to `stats_records.json`.

The stats worker cannot import slotflow (decision 0005), so its tests read that file instead: a
record the models refuse must be refused by the worker too (counted as unreadable, never stored),
and one they accept must be counted and stored. `tests/contracts/test_stats_records_are_current.py`
keeps the file equal to what this module writes (`python -m tests.integration.acceptance.stats_records`
writes it again).
"""

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slotflow.contracts import (
    REGISTRY,
    DeadLetterStatusChanged,
    JobDue,
    Message,
    RunCompleted,
    RunStarted,
    SlotSkipped,
    wrap,
)
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS, TopicSpec
from slotflow.core.identity import job_due_event_id, run_id
from slotflow.errors import PoisonMessage
from slotflow.testing.badinput import HostileValue, hostile_values

RECORDS_FILE = Path(__file__).with_name("stats_records.json")
#: Every instant of the records but the hostile ones; the worker's integration test moves it to a
#: recent minute (the worker counts what falls in its windows).
AT = datetime(2026, 1, 1, tzinfo=UTC)
AT_TEXT = "2026-01-01T00:00:00Z"

_RUN: dict[str, Any] = {"attempt": 1, "fence_token": 1, "owner": "c", "slot": AT}


def _raw(message: Message, *, id: str, key: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        encode(wrap(message, id=id, key=key, source="foreign", occurred_at=AT))
    )
    return loaded


def _run_started(job: str) -> tuple[TopicSpec, dict[str, Any]]:
    run = run_id(job, AT)
    return RUN_EVENTS, _raw(
        RunStarted(run_id=run, job_id=job, started_at=AT, **_RUN), id=f"{run}/1/started", key=job
    )


def _placements(n: int, hostile: HostileValue) -> list[tuple[str, str, TopicSpec, dict[str, Any]]]:
    """(field, family, topic, record) for each place the stats worker reads a value of this kind."""
    job = f"stats-{n}"
    out: list[tuple[str, str, TopicSpec, dict[str, Any]]] = []
    if hostile.kind in ("id", "text"):
        spec, raw = _run_started(job)
        raw["data"]["job_id"] = raw["key"] = hostile.value
        raw["data"]["run_id"] = run = f"{hostile.value}@{AT_TEXT}"
        raw["id"] = f"{run}/1/started"
        out.append(("job_id", "runs", spec, raw))
        skipped = _raw(
            SlotSkipped(schedule_id=job, run_id=run_id(job, AT), slot=AT, reason="paused"),
            id=f"{job}/skipped",
            key=job,
        )
        skipped["data"]["schedule_id"] = skipped["key"] = hostile.value
        out.append(("schedule_id", "schedules", SCHEDULE_EVENTS, skipped))
        parked = _raw(
            DeadLetterStatusChanged(
                dead_letter_id=f"t:0:{n}",
                status="parked",
                reason="undecodable",
                topic="t",
                source_service="x",
                at=AT,
            ),
            id=f"t:0:{n}/parked",
            key=f"t:0:{n}",
        )
        parked["data"]["topic"] = hostile.value
        out.append(("topic", "dlq", DLQ_EVENTS, parked))
        due_run = run_id(job, AT)
        due = _raw(
            JobDue(run_id=due_run, job_id=job, slot=AT, handler="stats.h"),
            id=job_due_event_id(due_run, 1),
            key=job,
        )
        due["data"]["handler"] = hostile.value
        out.append(("handler", "runs", JOBS_DUE, due))
    if hostile.kind == "json":
        run = run_id(job, AT)
        completed = _raw(
            RunCompleted(run_id=run, job_id=job, started_at=AT, finished_at=AT, **_RUN),
            id=f"{run}/1/completed",
            key=job,
        )
        completed["data"]["result"] = hostile.value
        out.append(("result", "runs", RUN_EVENTS, completed))
        due = _raw(
            JobDue(run_id=run, job_id=job, slot=AT, handler="stats.h"), id=job_due_event_id(run, 1), key=job
        )
        due["data"]["payload"] = hostile.value
        out.append(("payload", "runs", JOBS_DUE, due))
    if hostile.kind == "instant":
        spec, raw = _run_started(job)
        raw["data"]["started_at"] = hostile.value
        out.append(("started_at", "runs", spec, raw))
    return out


def _verdict(spec: TopicSpec, raw: dict[str, Any]) -> str | None:
    """Why the models refuse the record, or None when they take it."""
    value = json.dumps(raw, allow_nan=True).encode()
    try:
        REGISTRY.parse(decode(value))
    except PoisonMessage as poison:
        return f"{poison.reason}: {poison}"
    return None


def stats_records() -> list[dict[str, Any]]:
    """Every placement of every hostile value: the record's JSON text and the models' verdict."""
    out = []
    for n, hostile in enumerate(hostile_values()):
        for field, family, spec, raw in _placements(n, hostile):
            refused = _verdict(spec, raw)
            out.append(
                {
                    "case": f"{hostile.name} in {raw['type']}.{field}",
                    "family": family,
                    "topic": spec.name,
                    "value": json.dumps(raw, allow_nan=True),
                    "refused": refused,
                }
            )
    return out


def render() -> str:
    # ASCII only: a NUL or a lone surrogate reaches every reader as its JSON escape.
    return json.dumps(stats_records(), ensure_ascii=True, indent=1) + "\n"


if __name__ == "__main__":
    RECORDS_FILE.write_text(render())
