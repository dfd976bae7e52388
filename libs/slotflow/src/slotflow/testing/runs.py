"""`run_context(...)`: a RunContext for unit-testing a handler without a claimer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from slotflow.core import identity
from slotflow.errors import FenceRejected
from slotflow.pg.pool import Pool
from slotflow.runs.context import FencedWrites, HeartbeatHook, RunContext

#: The slot a test run is for unless it names one (fixed, so tests are repeatable).
DEFAULT_SLOT = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)


def run_context(
    payload: Mapping[str, Any] | None = None,
    *,
    job_id: str = "test.job",
    slot: datetime = DEFAULT_SLOT,
    run_id: str | None = None,
    attempt: int = 1,
    fence_token: int = 1,
    kind: str = "scheduled",
    owner: str = "test",
    pool: Pool | None = None,
    workflow_id: str | None = None,
    sequence: int | None = None,
    tags: tuple[str, ...] = (),
    handler: str = "",
    rejected: list[FenceRejected] | None = None,
    heartbeat_details: Any = None,
    heartbeats: list[Any] | None = None,
) -> RunContext:
    """The context a claimer would pass to a handler for this run.

    `run_id` defaults to the claimer's: `{job_id}@{slot}`, or `{workflow_id}/{sequence}` for an
    activity (a naive `slot` raises NaiveDatetime, as it would in the ticker). With `pool` (a real database) the
    context's fenced writes go there, stamped with `fence_token`; without it they raise
    ConfigurationError, as in a claimer with no handler database. Rejected fenced writes are
    appended to `rejected` when given (the claimer counts them in a metric). `heartbeat_details`
    is what an earlier attempt recorded (`ctx.heartbeat_details`); the details of each
    `ctx.heartbeat` are appended to `heartbeats` when given (None for one without details), after
    the same checks the claimer makes (JSON, storable, at most HEARTBEAT_DETAILS_MAX_BYTES).
    """
    if run_id is None:
        run_id = (
            identity.run_id(job_id, slot)
            if workflow_id is None or sequence is None
            else (identity.activity_run_id(workflow_id, sequence))
        )
    return RunContext(
        run_id=run_id,
        job_id=job_id,
        slot=slot,
        attempt=attempt,
        fence_token=fence_token,
        payload=dict(payload or {}),
        kind=kind,
        owner=owner,
        fenced=FencedWrites(
            token=fence_token, pool=pool, on_rejected=rejected.append if rejected is not None else None
        ),
        pool=pool,
        workflow_id=workflow_id,
        sequence=sequence,
        tags=tags,
        handler=handler,
        heartbeat_details=heartbeat_details,
        on_heartbeat=_recorder(heartbeats) if heartbeats is not None else None,
    )


def _recorder(heartbeats: list[Any]) -> HeartbeatHook:
    """Appends each heartbeat's details, decoded (None for one without details)."""

    def record(details: str | None) -> None:
        heartbeats.append(None if details is None else json.loads(details))

    return record
