"""The claimer's view of one run row, and of one JobDue record on its way to becoming one."""

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from opentelemetry.context import Context

from slotflow import tracing
from slotflow.contracts import AttemptRecord, Envelope, JobDue, RetryPolicy
from slotflow.contracts.acceptance import STORED
from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.kafka.records import Record


@dataclass(frozen=True, slots=True)
class Due:
    """A decoded JobDue record."""

    record: Record
    #: None when the record was validated in one pass straight into its JobDue (the intake).
    envelope: Envelope | None
    job: JobDue

    @property
    def redrive_count(self) -> int:
        """The run's redrive number this JobDue carries (0 for an ordinary one): a redrive's re-issue
        (`JobDue.redrive`), or a record the old dlq relay sent back (its header)."""
        return max(self.job.redrive, redrive_count(self.record))


def redrive_count(record: Record) -> int:
    raw = record.header(REDRIVE_COUNT_HEADER)
    if raw is None:
        return 0
    try:
        return max(int(raw.decode("ascii", errors="replace").strip()), 0)
    except ValueError:
        return 0


@functools.lru_cache(maxsize=256)
def _retry_policy(raw: str) -> RetryPolicy:
    # Runs of one schedule share one policy: parse each distinct JSON text once.
    return RetryPolicy.model_validate_json(raw)


class Run:
    """A run row as the database returned it (after a claim, an outcome or a takeover).

    The JSON columns and the stored JobDue record are decoded only when asked for: most rows
    only ever need their identity, token and state.
    """

    __slots__ = (
        "_due",
        "_row",
        "attempt",
        "cancel_requested",
        "fence_token",
        "finished_at",
        "handler",
        "job_id",
        "kind",
        "lease_lapses",
        "overlap",
        "owner",
        "redrive_count",
        "round_start",
        "run_id",
        "sequence",
        "slot",
        "started_at",
        "state",
        "tags",
        "takeovers",
        "trace",
        "updated_at",
        "workflow_id",
    )

    def __init__(self, row: asyncpg.Record, due: Record | None = None) -> None:
        self._row = row
        self._due = due
        self.run_id: str = row["run_id"]
        self.job_id: str = row["job_id"]
        self.slot: datetime = row["slot"]
        self.kind: str = row["kind"]
        self.handler: str = row["handler"]
        self.overlap: str = row["overlap"]
        self.workflow_id: str | None = row["workflow_id"]
        self.sequence: int | None = row["sequence"]
        self.tags: tuple[str, ...] = tuple(row["tags"])
        self.attempt: int = row["attempt"]
        self.round_start: int = row["round_start"]
        self.redrive_count: int = row["redrive_count"]
        self.state: str = row["state"]
        self.fence_token: int = row["fence_token"]
        self.owner: str | None = row["owner"]
        self.cancel_requested: bool = row["cancel_requested"]
        self.takeovers: int = row["takeovers"]
        #: Takeovers of a lease that lapsed rather than being released (see 0002_lease_lapses.sql).
        self.lease_lapses: int = row["lease_lapses"]
        self.started_at: datetime | None = row["started_at"]
        self.finished_at: datetime | None = row["finished_at"]
        self.updated_at: datetime = row["updated_at"]
        #: The trace context of this claimer's latest span for the run (claim, then handler), so
        #: the next span and the events it stages join the run's trace; None while tracing is off.
        self.trace: Context | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record, due: Record | None = None) -> "Run":
        return cls(row, due)

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, state={self.state!r}, attempt={self.attempt}, token={self.fence_token})"

    @property
    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self._row["payload"])
        return value

    @property
    def retry(self) -> RetryPolicy:
        return _retry_policy(self._row["retry"])

    @property
    def history(self) -> tuple[dict[str, Any], ...]:
        return tuple(json.loads(self._row["history"]))

    @property
    def result(self) -> Any:
        raw = self._row["result"]
        return json.loads(raw) if raw is not None else None

    @property
    def error(self) -> dict[str, Any] | None:
        raw = self._row["error"]
        value: dict[str, Any] | None = json.loads(raw) if raw is not None else None
        return value

    @property
    def heartbeat_details(self) -> Any:
        """What the run's last activity heartbeat recorded (decoded), or None."""
        raw = self._row.get("heartbeat_details")
        return json.loads(raw) if raw is not None else None

    @property
    def due(self) -> Record:
        """The JobDue record that last claimed the run, byte-exact."""
        if self._due is None:
            row = self._row
            headers = json.loads(row["due_headers"])
            self._due = Record(
                topic=row["due_topic"],
                partition=row["due_partition"],
                offset=row["due_offset"],
                key=row["due_key"],
                value=row["due_value"],
                headers=tuple((str(k), str(v).encode("latin-1")) for k, v in headers.items()),
                timestamp_ms=row["due_timestamp_ms"],
            )
        return self._due

    def span_attributes(self) -> dict[str, Any]:
        """The attributes naming this run and its claim on the claimer's spans (claim, handler)."""
        attributes = tracing.run_attributes(
            run_id=self.run_id,
            job_id=self.job_id,
            slot=self.slot,
            attempt=self.attempt,
            kind=self.kind,
            handler=self.handler,
            workflow_id=self.workflow_id,
        )
        attributes["slotflow.fence_token"] = self.fence_token
        return attributes

    def trace_parent(self) -> Context | None:
        """The context the run's next span hangs below: this claimer's latest span for it, else
        the one its JobDue record carried (a run taken over or started from the buffer)."""
        if self.trace is not None:
            return self.trace
        try:
            return tracing.extract(self.due.headers)
        except (KeyError, ValueError):  # a row read without its JobDue columns
            return None

    @property
    def attempt_in_round(self) -> int:
        """The attempt number counted from the start of the current retry budget (1-based)."""
        return self.attempt - self.round_start + 1

    def job_due(self) -> JobDue:
        """The JobDue that claimed this run, decoded from the stored record."""
        # The record the intake accepted (the acceptance rule applied then) and stored.
        return JobDue.model_validate(decode(self.due.value).data, context=STORED)

    def attempt_records(self) -> tuple[AttemptRecord, ...]:
        """The history as AttemptRecords (failed attempts, takeovers, cancellations)."""
        return tuple(AttemptRecord.model_validate(entry) for entry in self.history)
