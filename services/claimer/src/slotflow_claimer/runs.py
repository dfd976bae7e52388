"""The claimer's view of one run row, and of one JobDue record on its way to becoming one."""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from slotflow.contracts import AttemptRecord, Envelope, JobDue, RetryPolicy
from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.kafka.records import Record


@dataclass(frozen=True, slots=True)
class Due:
    """A decoded JobDue record."""

    record: Record
    envelope: Envelope
    job: JobDue

    @property
    def redrive_count(self) -> int:
        """How often the DLQ sent this record back (0 for a first delivery)."""
        return redrive_count(self.record)


def redrive_count(record: Record) -> int:
    raw = record.header(REDRIVE_COUNT_HEADER)
    if raw is None:
        return 0
    try:
        return max(int(raw.decode("ascii", errors="replace").strip()), 0)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class Run:
    """A run row as the database returned it (after a claim, an outcome or a takeover)."""

    run_id: str
    job_id: str
    slot: datetime
    kind: str
    handler: str
    payload: dict[str, Any]
    retry: RetryPolicy
    overlap: str
    workflow_id: str | None
    sequence: int | None
    tags: tuple[str, ...]
    attempt: int
    round_start: int
    redrive_count: int
    state: str
    fence_token: int
    owner: str | None
    cancel_requested: bool
    takeovers: int
    history: tuple[dict[str, Any], ...]
    result: Any
    error: dict[str, Any] | None
    due: Record
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> "Run":
        headers = json.loads(row["due_headers"])
        error = row["error"]
        result = row["result"]
        return cls(
            run_id=row["run_id"],
            job_id=row["job_id"],
            slot=row["slot"],
            kind=row["kind"],
            handler=row["handler"],
            payload=json.loads(row["payload"]),
            retry=RetryPolicy.model_validate_json(row["retry"]),
            overlap=row["overlap"],
            workflow_id=row["workflow_id"],
            sequence=row["sequence"],
            tags=tuple(row["tags"]),
            attempt=row["attempt"],
            round_start=row["round_start"],
            redrive_count=row["redrive_count"],
            state=row["state"],
            fence_token=row["fence_token"],
            owner=row["owner"],
            cancel_requested=row["cancel_requested"],
            takeovers=row["takeovers"],
            history=tuple(json.loads(row["history"])),
            result=json.loads(result) if result is not None else None,
            error=json.loads(error) if error is not None else None,
            due=Record(
                topic=row["due_topic"],
                partition=row["due_partition"],
                offset=row["due_offset"],
                key=row["due_key"],
                value=row["due_value"],
                headers=tuple((str(k), str(v).encode("latin-1")) for k, v in headers.items()),
                timestamp_ms=row["due_timestamp_ms"],
            ),
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            updated_at=row["updated_at"],
        )

    @property
    def attempt_in_round(self) -> int:
        """The attempt number counted from the start of the current retry budget (1-based)."""
        return self.attempt - self.round_start + 1

    def job_due(self) -> JobDue:
        """The JobDue that claimed this run, decoded from the stored record."""
        return JobDue.model_validate(decode(self.due.value).data)

    def attempt_records(self) -> tuple[AttemptRecord, ...]:
        """The history as AttemptRecords (failed attempts, takeovers, cancellations)."""
        return tuple(AttemptRecord.model_validate(entry) for entry in self.history)


def headers_json(record: Record) -> str:
    """Record headers as a JSON object; values kept byte-exact through latin-1."""
    return json.dumps({k: v.decode("latin-1") for k, v in record.headers})
