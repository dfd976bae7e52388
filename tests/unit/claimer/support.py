"""Run rows without a database, for unit tests of the claimer's pure parts."""

import json
from datetime import UTC, datetime
from typing import Any

from slotflow.contracts import JobDue, RetryPolicy
from slotflow.contracts.codec import encode
from slotflow.kafka.records import Record
from slotflow_claimer.events import job_due_envelope
from slotflow_claimer.runs import Due, Run

SLOT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
NOW = datetime(2026, 12, 2, 2, 0, 1, tzinfo=UTC)


def due(
    job_id: str = "payouts",
    run_id: str | None = None,
    *,
    overlap: str = "allow",
    attempt: int = 1,
    offset: int = 0,
) -> Due:
    job = JobDue.model_validate(
        {
            "run_id": run_id or f"{job_id}@2026-12-02T02:00:00Z",
            "job_id": job_id,
            "slot": SLOT,
            "attempt": attempt,
            "handler": "payouts.pay_merchants",
            "payload": {"merchant_id": "m-1", "amount_cents": 100},
            "overlap": overlap,
        }
    )
    envelope = job_due_envelope(job, at=NOW)
    record = Record("t.slotflow.jobs.due.v1", 0, offset, job.job_id.encode(), encode(envelope), (), 1)
    return Due(record, envelope, job)


def run(
    *,
    attempt: int = 1,
    round_start: int = 1,
    token: int = 1,
    state: str = "running",
    retry: RetryPolicy | None = None,
    history: list[dict[str, Any]] | None = None,
    workflow_id: str | None = None,
    sequence: int | None = None,
    result: Any = None,
) -> Run:
    d = due(run_id="order-7/3" if workflow_id else None)
    row = {
        "run_id": d.job.run_id,
        "job_id": d.job.job_id,
        "slot": SLOT,
        "kind": "activity" if workflow_id else "scheduled",
        "handler": "payouts.pay_merchants",
        "payload": json.dumps(d.job.payload),
        "retry": (retry or RetryPolicy()).model_dump_json(),
        "overlap": "allow",
        "workflow_id": workflow_id,
        "sequence": sequence,
        "tags": ["money"],
        "attempt": attempt,
        "round_start": round_start,
        "redrive_count": 0,
        "state": state,
        "fence_token": token,
        "owner": "claimer-a",
        "cancel_requested": False,
        "takeovers": 0,
        "lease_lapses": 0,
        "history": json.dumps(history or []),
        "result": json.dumps(result) if result is not None else None,
        "error": None,
        "started_at": NOW,
        "finished_at": NOW if state != "running" else None,
        "updated_at": NOW,
    }
    return Run(row, d.record)  # type: ignore[arg-type]
