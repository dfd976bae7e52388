"""Queries over the read model. Every list is keyset-paginated: the cursor is the last row's sort key.

Keyset (not OFFSET) pagination keeps each page one index range scan however deep the client goes,
and a row inserted while a client pages cannot make it see a row twice.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from slotflow.core.cursors import decode_cursor, encode_cursor
from slotflow.pg.pool import Pool


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class Filters:
    """Builds a WHERE clause with numbered parameters."""

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def add(self, clause: str, *values: Any) -> None:
        names = []
        for value in values:
            self.args.append(value)
            names.append(f"${len(self.args)}")
        self.clauses.append(clause.format(*names))

    def where(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "true"

    def param(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"


async def _page(
    pool: Pool, sql: str, filters: Filters, limit: int, key: tuple[str, ...]
) -> tuple[list[asyncpg.Record], str | None]:
    rows = await pool.fetch(sql + f" LIMIT {filters.param(limit + 1)}", *filters.args)
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor([rows[-1][k] for k in key]) if more and rows else None
    return rows, cursor


# -- schedules ----------------------------------------------------------------------------------

_SCHEDULE_COLUMNS = (
    "schedule_id, definition, handler, paused, pause_reason, resume_at, tags, next_fire_at, "
    "created_at, updated_at, deleted, "
    # A one-shot is finished once its slot has a run or a recorded skip (slot equality: a manual
    # trigger's run, or a run of an earlier `at` the schedule was updated away from, does not count).
    "(definition->'spec'->>'kind' = 'once' AND ("
    "EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.job_id = s.schedule_id "
    "AND r.slot = (s.definition->'spec'->>'at')::timestamptz) OR "
    "EXISTS (SELECT 1 FROM {schema}.skipped_slots k WHERE k.schedule_id = s.schedule_id "
    "AND k.slot = (s.definition->'spec'->>'at')::timestamptz))) AS once_handled"
)


def schedule_row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["definition"] = _loads(out["definition"])
    out["spec"] = out["definition"]["spec"]
    out["tags"] = list(out["tags"])
    return out


async def list_schedules(
    pool: Pool,
    schema: str,
    *,
    paused: bool | None,
    tag: str | None,
    handler: str | None,
    deleted: bool,
    limit: int,
    cursor: str | None,
) -> Page:
    f = Filters()
    f.add("deleted = {}", deleted)
    if paused is not None:
        f.add("paused = {}", paused)
    if tag is not None:
        f.add("{} = ANY(tags)", tag)
    if handler is not None:
        f.add("handler = {}", handler)
    if cursor is not None:
        (after,) = decode_cursor(cursor, (str,))
        f.add("schedule_id > {}", after)
    columns = _SCHEDULE_COLUMNS.format(schema=schema)
    sql = f"SELECT {columns} FROM {schema}.schedules s WHERE {f.where()} ORDER BY schedule_id"
    rows, next_cursor = await _page(pool, sql, f, limit, ("schedule_id",))
    return Page([schedule_row(r) for r in rows], next_cursor)


async def get_schedule(pool: Pool, schema: str, schedule_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(
        f"SELECT {_SCHEDULE_COLUMNS.format(schema=schema)} FROM {schema}.schedules s WHERE schedule_id = $1",
        schedule_id,
    )
    if row is None:
        return None
    out = schedule_row(row)
    counts = await pool.fetch(
        f"SELECT state, count(*) AS n FROM {schema}.runs WHERE job_id = $1 GROUP BY state", schedule_id
    )
    out["runs_by_state"] = {r["state"]: int(r["n"]) for r in counts}
    return out


# -- runs ---------------------------------------------------------------------------------------

_RUN_SELECT = """
SELECT r.*, COALESCE((
    SELECT json_agg(json_build_object(
        'attempt', a.attempt, 'fence_token', a.fence_token, 'owner', a.owner,
        'started_at', a.started_at, 'finished_at', a.finished_at, 'outcome', a.outcome,
        'error', a.error, 'retry_at', a.retry_at{detail}) ORDER BY a.fence_token, a.attempt)
      FROM {schema}.run_attempts a WHERE a.run_id = r.run_id), '[]') AS attempts
  FROM {schema}.runs r
"""
#: Only one run's page reads the tracebacks and log lines; lists of runs leave them out.
_ATTEMPT_DETAIL = ", 'traceback', a.traceback, 'logs', COALESCE(a.logs, '[]'::jsonb)"


def _run_select(schema: str, *, detail: bool = False) -> str:
    return _RUN_SELECT.format(schema=schema, detail=_ATTEMPT_DETAIL if detail else "")


def _millis(span: timedelta) -> float:
    return round(span / timedelta(microseconds=1)) / 1000


def run_row(row: asyncpg.Record, *, detail: bool = False) -> dict[str, Any]:
    out = dict(row)
    payload = out.pop("payload", None)
    if detail:
        out["payload"] = _loads(payload)
    out["attempts"] = _loads(out["attempts"])
    out["result"] = _loads(out["result"])
    out["error"] = _loads(out["error"])
    out["tags"] = list(out["tags"])
    target = out["fire_at"] or out["slot"]
    produced, started, finished = out["produced_at"], out["started_at"], out["finished_at"]
    out["timings"] = {
        "due_at": out["due_at"],
        "produced_at": produced,
        "fire_at": out["fire_at"],
        "started_at": started,
        "finished_at": finished,
        # Whole microseconds as milliseconds: 390.342, never 390.34200000000004 (float noise).
        "lateness_ms": _millis(produced - target) if produced else None,
        "duration_ms": _millis(finished - started) if started and finished else None,
    }
    return out


async def list_runs(
    pool: Pool,
    schema: str,
    *,
    job_id: str | None,
    state: str | None,
    start: datetime | None,
    end: datetime | None,
    ascending: bool,
    limit: int,
    cursor: str | None,
) -> Page:
    f = Filters()
    if job_id is not None:
        f.add("r.job_id = {}", job_id)
    if state is not None:
        f.add("r.state = {}", state)
    if start is not None:
        f.add("r.slot >= {}", start)
    if end is not None:
        f.add("r.slot < {}", end)
    if cursor is not None:
        slot, run_id = decode_cursor(cursor, (datetime, str))
        f.add("(r.slot, r.run_id) > ({}, {})" if ascending else "(r.slot, r.run_id) < ({}, {})", slot, run_id)
    order = "ASC" if ascending else "DESC"
    sql = _run_select(schema) + f" WHERE {f.where()} ORDER BY r.slot {order}, r.run_id {order}"
    rows, next_cursor = await _page(pool, sql, f, limit, ("slot", "run_id"))
    return Page([run_row(r) for r in rows], next_cursor)


async def backfill_states(
    pool: Pool, schema: str, job_id: str, start: datetime, end: datetime
) -> dict[str, str]:
    """Run id -> state of the schedule's backfilled runs with slot in [start, end)."""
    rows = await pool.fetch(
        f"SELECT run_id, state FROM {schema}.runs WHERE job_id = $1 AND slot >= $2 AND slot < $3 "
        "AND kind = 'backfill'",
        job_id,
        start,
        end,
    )
    return {row["run_id"]: row["state"] for row in rows}


async def get_run(pool: Pool, schema: str, run_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(_run_select(schema, detail=True) + " WHERE r.run_id = $1", run_id)
    return run_row(row, detail=True) if row is not None else None


# -- workflows ----------------------------------------------------------------------------------

# Without typed history the newest activity run is the best guess at the current step.
_WORKFLOW_SELECT = """
SELECT w.workflow_id, w.workflow_type, w.input, w.status, w.cancel_requested, w.cancel_reason,
       w.requested_at, w.updated_at, w.last_sequence, w.started_at, w.ended_at, w.derived,
       COALESCE(w.requested_at, w.updated_at) AS sort_at,
       CASE WHEN w.last_sequence IS NOT NULL THEN w.current_step ELSE
       (SELECT r.handler FROM {schema}.runs r WHERE r.workflow_id = w.workflow_id
         ORDER BY r.sequence DESC NULLS LAST, r.slot DESC LIMIT 1) END AS current_step
  FROM {schema}.workflows w
"""


def workflow_row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["input"] = _loads(out["input"])
    out.pop("derived", None)
    return out


async def list_workflows(
    pool: Pool,
    schema: str,
    *,
    workflow_type: str | None,
    status: str | None,
    start: datetime | None,
    end: datetime | None,
    limit: int,
    cursor: str | None,
) -> Page:
    f = Filters()
    if workflow_type is not None:
        f.add("w.workflow_type = {}", workflow_type)
    if status is not None:
        f.add("w.status = {}", status)
    if start is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) >= {}", start)
    if end is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) < {}", end)
    if cursor is not None:
        at, workflow_id = decode_cursor(cursor, (datetime, str))
        f.add("(COALESCE(w.requested_at, w.updated_at), w.workflow_id) < ({}, {})", at, workflow_id)
    sql = (
        _WORKFLOW_SELECT.format(schema=schema)
        + f" WHERE {f.where()} ORDER BY COALESCE(w.requested_at, w.updated_at) DESC, w.workflow_id DESC"
    )
    rows, next_cursor = await _page(pool, sql, f, limit, ("sort_at", "workflow_id"))
    return Page([workflow_row(r) for r in rows], next_cursor)


_TERMINAL_RUN_STATES = ["completed", "dead_lettered", "skipped"]


async def get_workflow(pool: Pool, schema: str, workflow_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(
        _WORKFLOW_SELECT.format(schema=schema) + " WHERE w.workflow_id = $1", workflow_id
    )
    if row is None:
        return None
    derived: dict[str, Any] = _loads(row["derived"]) or {}
    out = workflow_row(row)
    activities = await pool.fetch(
        _run_select(schema) + " WHERE r.workflow_id = $1 ORDER BY r.sequence, r.slot",
        workflow_id,
    )
    out["activities"] = [run_row(r) for r in activities]
    runs = {a["run_id"]: a for a in out["activities"]}
    if row["last_sequence"] is None:
        _untyped(out, await _ticker_timers(pool, schema, workflow_id))
    else:
        _typed(out, derived, runs)
    out["history_length"] = await pool.fetchval(
        f"SELECT count(*) FROM {schema}.workflow_history WHERE workflow_id = $1", workflow_id
    )
    return out


async def _ticker_timers(pool: Pool, schema: str, workflow_id: str) -> list[dict[str, Any]]:
    timers = await pool.fetch(
        f"SELECT * FROM {schema}.timers WHERE owner = $1 AND action = 'timer_fired' ORDER BY fire_at, timer_id",
        workflow_id,
    )
    return [dict(t) for t in timers]


def _untyped(out: dict[str, Any], timers: list[dict[str, Any]]) -> None:
    """No typed history yet: what the commands, activity runs and timers alone tell."""
    out["steps"], out["compensations"], out["signals"], out["anomalies"] = [], [], [], []
    out.update(result=None, error=None, compensated=None, non_determinism=None, gap_at=None)
    out["pending_activities"] = [a for a in out["activities"] if a["state"] not in _TERMINAL_RUN_STATES]
    out["timers"] = timers
    out["pending_timers"] = [t for t in timers if t["status"] == "pending"]


def _typed(out: dict[str, Any], derived: dict[str, Any], runs: dict[str, dict[str, Any]]) -> None:
    """The state folded from the typed history, with each activity's run state beside it."""
    steps = [dict(step) for step in derived.get("steps", [])]
    for step in steps:
        run = runs.get(step["run_id"])
        step["run_state"] = run["state"] if run is not None else None
    out["steps"] = steps
    out["pending_activities"] = [
        {
            "sequence": step["sequence"],
            "handler": step["activity"],
            "run_id": step["run_id"],
            "state": step["run_state"] or "scheduled",
            "attempt": runs[step["run_id"]]["attempt"] if step["run_id"] in runs else 0,
            "compensation": step["compensation"],
            "compensates": step["compensates"],
            "scheduled_at": step["scheduled_at"],
        }
        for step in steps
        if step["state"] in ("scheduled", "parked")
    ]
    out["timers"] = [
        {
            "timer_id": timer["timer_id"],
            "owner": out["workflow_id"],
            "action": "timer_fired",
            "sequence": timer["sequence"],
            "fire_at": timer["fire_at"],
            "status": timer["status"],
            "fired_at": timer["fired_at"],
        }
        for timer in derived.get("timers", [])
    ]
    out["pending_timers"] = [t for t in out["timers"] if t["status"] == "pending"]
    for name in ("compensations", "signals", "anomalies"):
        out[name] = derived.get(name, [])
    for name in ("result", "error", "compensated", "non_determinism", "gap_at"):
        out[name] = derived.get(name)


def history_row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["data"] = _loads(out["data"])
    out.pop("position", None)
    return out


async def workflow_history(
    pool: Pool, schema: str, workflow_id: str, *, limit: int, cursor: str | None, origin: str | None = None
) -> Page:
    f = Filters()
    f.add("workflow_id = {}", workflow_id)
    if origin is not None:
        f.add("origin = {}", origin)
    if cursor is not None:
        at, position, entry_id = decode_cursor(cursor, (datetime, int, str))
        f.add("(at, COALESCE(sequence, 0), entry_id) > ({}, {}, {})", at, position, entry_id)
    # Events recorded in the same instant keep their history order (sequence), not the id's text order.
    sql = (
        f"SELECT *, COALESCE(sequence, 0) AS position FROM {schema}.workflow_history WHERE {f.where()} "
        "ORDER BY at, COALESCE(sequence, 0), entry_id"
    )
    rows, next_cursor = await _page(pool, sql, f, limit, ("at", "position", "entry_id"))
    return Page([history_row(r) for r in rows], next_cursor)


# -- dead letters and commands ------------------------------------------------------------------


async def list_dead_letters(
    pool: Pool,
    schema: str,
    *,
    status: str | None,
    reason: str | None,
    topic: str | None,
    source: str | None,
    job_id: str | None,
    limit: int,
    cursor: str | None,
) -> Page:
    f = Filters()
    for column, value in (
        ("status", status),
        ("reason", reason),
        ("topic", topic),
        ("source_service", source),
        ("job_id", job_id),
    ):
        if value is not None:
            f.add(f"{column} = {{}}", value)
    if cursor is not None:
        at, dead_letter_id = decode_cursor(cursor, (datetime, str))
        f.add("(status_at, dead_letter_id) < ({}, {})", at, dead_letter_id)
    sql = (
        f"SELECT * FROM {schema}.dead_letters WHERE {f.where()} ORDER BY status_at DESC, dead_letter_id DESC"
    )
    rows, next_cursor = await _page(pool, sql, f, limit, ("status_at", "dead_letter_id"))
    return Page([_dead_letter_row(r) for r in rows], next_cursor)


def _dead_letter_row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["tags"] = list(out["tags"])
    return out


async def get_dead_letter(pool: Pool, schema: str, dead_letter_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(
        f"SELECT * FROM {schema}.dead_letters WHERE dead_letter_id = $1", dead_letter_id
    )
    if row is None:
        return None
    out = _dead_letter_row(row)
    # A dead-lettered run's letter shows what the run page shows: every attempt with its error,
    # traceback and log lines, and the traceback of the failure that gave up.
    run = await get_run(pool, schema, out["run_id"]) if out["run_id"] else None
    attempts: list[dict[str, Any]] = run["attempts"] if run is not None else []
    out["attempts"] = attempts
    failed = [a for a in attempts if a.get("traceback")]
    out["traceback"] = failed[-1]["traceback"] if failed else None
    return out


async def get_command(pool: Pool, schema: str, command_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(f"SELECT * FROM {schema}.commands WHERE command_id = $1", command_id)
    return dict(row) if row is not None else None


async def claimers(pool: Pool, schema: str) -> list[dict[str, Any]]:
    """Every claimer's newest announcement, with whether it is live by the database clock (its
    last announcement younger than three of its intervals)."""
    rows = await pool.fetch(
        f"SELECT claimer_id, handlers, interval_ms, started_at, announced_at, "
        f"announced_at > now() - make_interval(secs => 3 * interval_ms / 1000.0) AS live "
        f"FROM {schema}.claimers ORDER BY claimer_id"
    )
    return [{**dict(row), "handlers": list(row["handlers"])} for row in rows]


async def database_now(pool: Pool) -> datetime:
    value = await pool.fetchval("SELECT now()")
    if not isinstance(value, datetime):
        raise TypeError("now() did not return a timestamp")
    return value


# -- audit inputs -------------------------------------------------------------------------------


async def audit_inputs(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> tuple[list[asyncpg.Record], list[asyncpg.Record], list[asyncpg.Record]]:
    """The schedule's timeline, its runs in [start, end) with completing tokens, its skipped slots."""
    timeline = await pool.fetch(
        f"SELECT at, change, definition FROM {schema}.schedule_timeline WHERE schedule_id = $1 "
        "ORDER BY at, position, event_id",
        schedule_id,
    )
    runs = await pool.fetch(
        f"""
        SELECT r.run_id, r.slot, r.kind, r.state, r.produced_at, r.fire_at, r.completions,
               COALESCE((SELECT array_agg(a.fence_token ORDER BY a.fence_token) FROM {schema}.run_attempts a
                          WHERE a.run_id = r.run_id AND a.completed), '{{}}') AS tokens
          FROM {schema}.runs r WHERE r.job_id = $1 AND r.slot >= $2 AND r.slot < $3
        """,
        schedule_id,
        start,
        end,
    )
    skips = await pool.fetch(
        f"SELECT slot, run_id, reason, detail FROM {schema}.skipped_slots "
        "WHERE schedule_id = $1 AND slot >= $2 AND slot < $3",
        schedule_id,
        start,
        end,
    )
    return list(timeline), list(runs), list(skips)
