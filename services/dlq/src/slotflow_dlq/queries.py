"""Read the parked dead letters: list with filters and a cursor, inspect one raw and decoded.

The api service may import this module (it takes a pool or a connection and the schema name) or
mirror it from the DeadLetterStatusChanged events, which carry every field of `DeadLetterSummary`.
Every filter value is a bind parameter: names holding quotes or SQL stay data.
"""

import base64
import json
from datetime import datetime
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, ValidationError

from slotflow.contracts import DeadLetterFilter
from slotflow.contracts.dlq import DeadLetterStatus
from slotflow.core.cursors import decode_cursor, encode_cursor
from slotflow.core.nul import pg_text
from slotflow.errors import PermanentError
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import Filters, sql, sql_with
from slotflow_dlq.sql import (
    DETAIL,
    OLDEST_PARKED_AGE,
    OLDEST_REDRIVING_AGE,
    PAGE,
    PARKED_BY_REASON,
    REDRIVES_OF,
)

Queryable: TypeAlias = "Pool | Conn"
MAX_PAGE = 500


def selection_sql(
    selection: DeadLetterFilter, *, default_status: DeadLetterStatus | None, first: int = 1
) -> tuple[str, list[Any]]:
    """A WHERE clause over `dead_letters` for ``selection``, numbered from ``$first``, and its values.

    ``default_status`` applies when the selection names no status: redrive and discard act on
    parked entries only, listing shows every status.
    """
    f = Filters(first=first)
    if selection.ids:
        f.add("id = ANY ({}::text[])", [pg_text(i) for i in selection.ids])
    status = selection.status or default_status
    if status is not None:
        f.add("status = {}", status)
    if selection.source_service is not None:
        f.add("(source_service = {0} OR {0} = ANY (seen_by))", pg_text(selection.source_service))
    for column, value in (
        ("topic", selection.topic),
        ("reason", selection.reason),
        ("job_id", selection.job_id),
        ("run_id", selection.run_id),
        ("workflow_id", selection.workflow_id),
    ):
        if value is not None:
            f.add(f"{column} = {{}}", pg_text(value))
    if selection.since is not None:
        f.add("first_seen >= {}", selection.since)
    if selection.until is not None:
        f.add("first_seen < {}", selection.until)
    return f.where(), f.args


class DeadLetterSummary(BaseModel):
    """One parked entry as a list shows it."""

    model_config = ConfigDict(frozen=True)

    dead_letter_id: str
    status: DeadLetterStatus
    reason: str
    error_type: str
    error: str
    source_service: str
    seen_by: list[str]
    topic: str
    partition: int
    offset: int
    key: str | None
    original_type: str | None
    run_id: str | None
    job_id: str | None
    tags: list[str]
    count: int
    redrive_count: int
    value_size: int
    value_truncated: bool
    first_seen: datetime
    last_seen: datetime
    status_changed_at: datetime
    note: str
    redrive_of: str | None
    workflow_id: str | None
    sequence: int | None
    redrive_target: str | None


class RedriveRecord(BaseModel):
    """One redrive request of the letter and its owner's answer (none yet: it waits)."""

    request_id: str
    command_id: str
    target: str
    kind: str
    definition: str
    redrive: int
    requested_at: datetime
    answered_at: datetime | None
    outcome: str | None
    reason: str


class DeadLetterDetail(DeadLetterSummary):
    """One entry with everything: the raw record, the decoded envelope, the redrives so far."""

    traceback: str
    key_b64: str | None
    value_b64: str
    headers: dict[str, str]
    headers_b64: list[tuple[str, str]]
    decoded: Any
    history: list[Any]
    record_time: datetime | None
    prior_redrives: int
    redrives: list[RedriveRecord]


class Page(BaseModel):
    items: list[DeadLetterSummary]
    next_cursor: str | None


def _summary_fields(row: Any) -> dict[str, Any]:
    return {
        "dead_letter_id": row["id"],
        "status": row["status"],
        "reason": row["reason"],
        "error_type": row["error_type"],
        "error": row["error"],
        "source_service": row["source_service"],
        "seen_by": list(row["seen_by"]),
        "topic": row["topic"],
        "partition": row["partition"],
        "offset": row["offset"],
        "key": row["key_text"],
        "original_type": row["original_type"],
        "run_id": row["run_id"],
        "job_id": row["job_id"],
        "tags": list(row["tags"]),
        "count": row["count"],
        "redrive_count": row["redrive_count"],
        "value_size": row["value_size"],
        "value_truncated": row["value_truncated"],
        "first_seen": row["first_seen"],
        "last_seen": row["last_seen"],
        "status_changed_at": row["status_changed_at"],
        "note": row["note"],
        "redrive_of": row["redrive_of"],
        "workflow_id": row["workflow_id"],
        "sequence": row["sequence"],
        "redrive_target": row["redrive_target"],
    }


def _cursor(row: Any) -> str:
    return encode_cursor([row["first_seen"], row["id"]])


async def list_dead_letters(
    db: Queryable,
    *,
    schema: str,
    selection: DeadLetterFilter | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page:
    """Entries matching ``selection``, newest first, ``limit`` at a time.

    Raises:
        InvalidCursor: ``cursor`` was not returned by this function.
    """
    limit = max(1, min(limit, MAX_PAGE))
    where, params = selection_sql(selection or DeadLetterFilter(), default_status=None, first=2)
    if cursor is not None:
        first_seen, last_id = decode_cursor(cursor, (datetime, str))
        at = len(params) + 2
        where += f" AND (first_seen, id) < (${at}, ${at + 1})"
        params += [first_seen, last_id]
    rows = await db.fetch(
        sql_with(PAGE, schema, where=where),
        limit + 1,
        *params,
    )
    items = [DeadLetterSummary(**_summary_fields(row)) for row in rows[:limit]]
    return Page(items=items, next_cursor=_cursor(rows[limit - 1]) if len(rows) > limit else None)


async def get_dead_letter(db: Queryable, *, schema: str, dead_letter_id: str) -> DeadLetterDetail | None:
    """The entry ``dead_letter_id`` with its raw record and redrives, or None."""
    row = await db.fetchrow(
        sql(DETAIL, schema),
        pg_text(dead_letter_id),
    )
    if row is None:
        return None
    redrives = await db.fetch(
        sql(REDRIVES_OF, schema),
        row["id"],
    )
    pairs: list[list[str]] = json.loads(row["headers"])
    headers_b64 = [(base64.b64decode(n).decode(errors="replace"), v) for n, v in pairs]
    fields = _summary_fields(row)
    fields["error"] = row["full_error"]
    try:
        return DeadLetterDetail(
            **fields,
            traceback=row["traceback"],
            key_b64=base64.b64encode(row["record_key"]).decode() if row["record_key"] is not None else None,
            value_b64=base64.b64encode(row["value"]).decode(),
            headers={n: base64.b64decode(v).decode(errors="replace") for n, v in headers_b64},
            headers_b64=headers_b64,
            decoded=json.loads(row["decoded"]) if row["decoded"] is not None else None,
            history=json.loads(row["history"]),
            record_time=row["record_time"],
            prior_redrives=row["prior_redrives"],
            redrives=[RedriveRecord(**dict(r)) for r in redrives],
        )
    except ValidationError as err:  # a row this service wrote always fits; say so loudly if not
        raise PermanentError(f"dead letter {dead_letter_id!r} does not read back: {err}") from err


async def parked_by_reason(db: Queryable, *, schema: str) -> dict[str, int]:
    """How many entries are parked now, per reason."""
    rows = await db.fetch(sql(PARKED_BY_REASON, schema))
    return {str(r["reason"]): int(r["n"]) for r in rows}


async def oldest_parked_age_seconds(db: Queryable, *, schema: str) -> float:
    """Seconds since the oldest parked entry was first seen, by the database clock; 0 when none."""
    age = await db.fetchval(sql(OLDEST_PARKED_AGE, schema))
    return float(age)


async def oldest_redriving_age_seconds(db: Queryable, *, schema: str) -> float:
    """Seconds the oldest unanswered redrive request has waited for its owner; 0 when none."""
    age = await db.fetchval(sql(OLDEST_REDRIVING_AGE, schema))
    return float(age)
