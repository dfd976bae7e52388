"""Queries over the read model. Every list is keyset-paginated: the cursor is the last row's sort key.

Keyset (not OFFSET) pagination keeps each page one index range scan however deep the client goes,
and a row inserted while a client pages cannot make it see a row twice.
The statements, each with the invariant it keeps, are in `slotflow_api.sql.read_model`.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import asyncpg

from slotflow.contracts import DeadLetterFilter
from slotflow.contracts.dlq import RedriveDefinition
from slotflow.contracts.topics import JOBS_DUE
from slotflow.core.cursors import decode_cursor, encode_cursor
from slotflow.history.fold import TERMINAL_STATUSES, WorkflowState, fold, run_history
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import Filters, sql, sql_with
from slotflow.redrive import LetterFacts, Unroutable, route
from slotflow.settings import KafkaSettings
from slotflow_api.query import add_query
from slotflow_api.sql.read_model import (
    ATTENTION,
    BACKFILL_RUN_STATES,
    COMMAND_BY_ID,
    COMMANDS_PAGE,
    COUNT_BACKFILLS_IN_FLIGHT,
    DATABASE_NOW,
    DEAD_LETTER_BY_ID,
    DEAD_LETTER_SELECTION_COUNTS,
    DEAD_LETTER_SELECTION_TAKEN,
    DEAD_LETTERS_PAGE,
    DOWNSTREAM_BY_NAME,
    DOWNSTREAM_CHANGES,
    HELD_COUNTS,
    HELD_RUNS,
    KNOWN_WORKFLOW_IDS,
    LIST_CLAIMERS,
    LIST_DOWNSTREAMS,
    LIVE_SCHEDULES,
    LOCK_BACKFILLS,
    RECORD_BACKFILL,
    REPAIRS_IN_RANGE,
    RUN_BY_ID,
    RUN_COUNTS_BY_STATE,
    RUNS_IN_RANGE,
    RUNS_PAGE,
    SCHEDULE_BY_ID,
    SCHEDULE_CHANGES_OF,
    SCHEDULE_TIMELINE_OF,
    SCHEDULES_PAGE,
    SKIPPED_IN_RANGE,
    TICKER_TIMERS_OF,
    WORKFLOW_ACTIVITIES,
    WORKFLOW_BY_ID,
    WORKFLOW_EVENTS_OF_ONE,
    WORKFLOW_HISTORY_LENGTH,
    WORKFLOW_HISTORY_PAGE,
    WORKFLOW_SELECTION,
    WORKFLOW_SELECTION_COUNTS,
    WORKFLOWS_PAGE,
)
from slotflow_api.workflow_projection import stored_event, waiting_columns


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def _page(
    pool: Pool, statement: str, schema: str, filters: Filters, limit: int, key: tuple[str, ...], **fixed: str
) -> tuple[list[asyncpg.Record], str | None]:
    """One page of ``statement`` (its `{where}` from ``filters``, `{limit}` one more than ``limit``
    to learn whether another page follows) and the cursor of the next page."""
    limit_param = filters.param(limit + 1)
    rendered = sql_with(statement, schema, where=filters.where(), limit=limit_param, **fixed)
    rows = await pool.fetch(rendered, *filters.args)
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor([rows[-1][k] for k in key]) if more and rows else None
    return rows, cursor


# -- schedules ----------------------------------------------------------------------------------


def with_health(row: dict[str, Any]) -> dict[str, Any]:
    """Fold the health columns of a schedule row into `last_run` and `failure_streak`."""
    run_id = row.pop("last_run_id", None)
    slot = row.pop("last_run_slot", None)
    state = row.pop("last_run_state", None)
    finished_at = row.pop("last_run_finished_at", None)
    row["last_run"] = (
        None
        if run_id is None
        else {"run_id": run_id, "slot": slot, "state": state, "finished_at": finished_at}
    )
    row["failure_streak"] = int(row.get("failure_streak") or 0)
    return row


def schedule_row(row: asyncpg.Record) -> dict[str, Any]:
    """A schedules row as the api returns it: the definition parsed, its spec beside it."""
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
    id_prefix: str | None = None,
) -> Page:
    """One page of schedules matching the filters, in schedule id order."""
    f = Filters()
    f.add("deleted = {}", deleted)
    if id_prefix:
        f.add("starts_with(schedule_id, {})", id_prefix)
    if paused is not None:
        f.add("paused = {}", paused)
    if tag is not None:
        f.add("{} = ANY(tags)", tag)
    if handler is not None:
        f.add("handler = {}", handler)
    if cursor is not None:
        (after,) = decode_cursor(cursor, (str,))
        f.add("schedule_id > {}", after)
    rows, next_cursor = await _page(pool, SCHEDULES_PAGE, schema, f, limit, ("schedule_id",))
    return Page([with_health(schedule_row(r)) for r in rows], next_cursor)


async def live_schedules(pool: Pool, schema: str, *, limit: int) -> list[dict[str, Any]]:
    """Every schedule not deleted, by id, at most ``limit`` (the calendar's input)."""
    rows = await pool.fetch(sql(LIVE_SCHEDULES, schema), limit)
    return [schedule_row(r) for r in rows]


async def get_schedule(pool: Pool, schema: str, schedule_id: str) -> dict[str, Any] | None:
    """One schedule with its health and how many of its runs are in each state, or None."""
    row = await pool.fetchrow(sql(SCHEDULE_BY_ID, schema), schedule_id)
    if row is None:
        return None
    out = with_health(schedule_row(row))
    counts = await pool.fetch(sql(RUN_COUNTS_BY_STATE, schema), schedule_id)
    out["runs_by_state"] = {r["state"]: int(r["n"]) for r in counts}
    return out


# -- runs ---------------------------------------------------------------------------------------


def _millis(span: timedelta) -> float:
    return round(span / timedelta(microseconds=1)) / 1000


def run_row(row: asyncpg.Record, *, detail: bool = False) -> dict[str, Any]:
    """A runs row as the api returns it: JSON parsed, timings gathered (payload only with ``detail``)."""
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
    """One page of runs matching the filters, by slot (oldest first when ``ascending``)."""
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
    rows, next_cursor = await _page(pool, RUNS_PAGE, schema, f, limit, ("slot", "run_id"), order=order)
    return Page([run_row(r) for r in rows], next_cursor)


async def backfill_states(
    pool: Pool, schema: str, job_id: str, start: datetime, end: datetime
) -> dict[str, str]:
    """Run id -> state of the schedule's runs with slot in [start, end), however they came."""
    rows = await pool.fetch(
        sql(BACKFILL_RUN_STATES, schema),
        job_id,
        start,
        end,
    )
    return {row["run_id"]: row["state"] for row in rows}


async def get_run(pool: Pool, schema: str, run_id: str) -> dict[str, Any] | None:
    """One run with every attempt, its traceback and log lines, or None."""
    row = await pool.fetchrow(sql(RUN_BY_ID, schema), run_id)
    return run_row(row, detail=True) if row is not None else None


# -- workflows ----------------------------------------------------------------------------------


def workflow_row(row: asyncpg.Record) -> dict[str, Any]:
    """A workflows row as the api returns it (the folded details left out)."""
    out = dict(row)
    out["input"] = _loads(out["input"])
    out["memo"] = _loads(out.get("memo")) or {}
    out["search_attributes"] = _loads(out.get("search_attributes")) or {}
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
    attention: timedelta | None = None,
    query: str | None = None,
) -> Page:
    """One page of workflows matching the filters, newest request first. ``attention``: only the
    workflows that need an operator (`slotflow_api.sql.read_model.ATTENTION_REASONS`), waits counted past that age.
    ``query``: the filter language's condition (`slotflow_api.query`), ANDed with the rest.

    Raises:
        QueryError: ``query`` does not parse or type (its position and what).
    """
    f = Filters()
    if query is not None:
        add_query(f, query)
    if workflow_type is not None:
        f.add("w.workflow_type = {}", workflow_type)
    if status is not None:
        f.add("w.status = {}", status)
    if attention is not None:
        f.add(ATTENTION, *[attention] * ATTENTION.count("{}"))
    if start is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) >= {}", start)
    if end is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) < {}", end)
    if cursor is not None:
        at, workflow_id = decode_cursor(cursor, (datetime, str))
        f.add("(COALESCE(w.requested_at, w.updated_at), w.workflow_id) < ({}, {})", at, workflow_id)
    rows, next_cursor = await _page(pool, WORKFLOWS_PAGE, schema, f, limit, ("sort_at", "workflow_id"))
    return Page([workflow_row(r) for r in rows], next_cursor)


# -- a bulk cancel or terminate: the workflows a selection takes ----------------------------------


@dataclass(frozen=True)
class WorkflowSelection:
    """What a bulk cancel or terminate selects: ``workflow_ids`` (any of them), ``workflow_type``
    and ``status``, ANDed; nothing given selects every workflow (the route refuses that unless
    told `all`)."""

    workflow_ids: tuple[str, ...] = ()
    workflow_type: str | None = None
    status: str | None = None

    def filters(self) -> Filters:
        f = Filters()
        if self.workflow_ids:
            f.add("w.workflow_id = ANY({}::text[])", list(self.workflow_ids))
        if self.workflow_type is not None:
            f.add("w.workflow_type = {}", self.workflow_type)
        if self.status is not None:
            f.add("w.status = {}", self.status)
        return f


@dataclass(frozen=True)
class SelectedWorkflows:
    """The workflows of a selection: ``rows`` (at most the limit asked, oldest request first),
    ``counts`` by (status, cancel requested) over the whole selection, and the named ids the read
    model does not know."""

    rows: list[dict[str, Any]]
    counts: dict[tuple[str, bool], int]
    unknown: list[str]
    #: The first workflows of the selection the action leaves out (oldest request first).
    left_out: list[dict[str, Any]]


async def select_workflows(
    pool: Pool,
    schema: str,
    selection: WorkflowSelection,
    *,
    takeable: frozenset[str],
    cancel_requested_too: bool,
    limit: int,
    shown: int,
) -> SelectedWorkflows:
    """The workflows ``selection`` takes whose status is in ``takeable`` (at most ``limit``; those
    whose cancel was already requested only with ``cancel_requested_too``), the counts of every
    status it matches, the first ``shown`` it leaves out, and the named ids not known."""
    counting = selection.filters()
    counts = await pool.fetch(
        sql_with(WORKFLOW_SELECTION_COUNTS, schema, where=counting.where()), *counting.args
    )
    taking = selection.filters()
    taking.add("w.status = ANY({}::text[])", sorted(takeable))
    if not cancel_requested_too:
        taking.add("NOT w.cancel_requested")
    limit_param = taking.param(limit)
    rows = await pool.fetch(
        sql_with(WORKFLOW_SELECTION, schema, where=taking.where(), limit=limit_param), *taking.args
    )
    leaving = selection.filters()
    leaving.add(
        "NOT (w.status = ANY({}::text[]) AND (NOT w.cancel_requested OR {}))",
        sorted(takeable),
        cancel_requested_too,
    )
    shown_param = leaving.param(shown)
    left_out = await pool.fetch(
        sql_with(WORKFLOW_SELECTION, schema, where=leaving.where(), limit=shown_param), *leaving.args
    )
    unknown: list[str] = []
    if selection.workflow_ids:
        known = {
            r["workflow_id"]
            for r in await pool.fetch(sql(KNOWN_WORKFLOW_IDS, schema), list(selection.workflow_ids))
        }
        unknown = [i for i in selection.workflow_ids if i not in known]
    return SelectedWorkflows(
        rows=[dict(r) for r in rows],
        counts={(r["status"], bool(r["cancel_requested"])): r["n"] for r in counts},
        unknown=unknown,
        left_out=[dict(r) for r in left_out],
    )


_TERMINAL_RUN_STATES = ["completed", "dead_lettered", "skipped"]
#: A workflow in one of these waits on nothing any more.
#: A closed workflow waits on nothing, a terminated one included (its parked steps stay parked in
#: the fold, but nothing retries them: the orchestrator refuses a retry of a closed workflow).
_CLOSED_WORKFLOW_STATES = TERMINAL_STATUSES


async def get_workflow(
    pool: Pool, schema: str, workflow_id: str, *, start_command_id: str | None = None
) -> dict[str, Any] | None:
    """One workflow with its activities, timers and the state folded from its history, or None.

    The row shows the newest run of the id. ``start_command_id`` asks for the run that start
    began instead (its continued runs included): the row when it is the newest, else that run
    folded from the history; None while no run began with it (not projected yet, or never).
    """
    row = await pool.fetchrow(sql(WORKFLOW_BY_ID, schema), workflow_id)
    if row is None:
        return None
    derived: dict[str, Any] = _loads(row["derived"]) or {}
    out = workflow_row(row)
    if start_command_id is not None and derived.get("command_id") != start_command_id:
        earlier = await _earlier_run(pool, schema, workflow_id, start_command_id)
        if earlier is None:
            return None
        derived = earlier.derived()
        out.update(_run_columns(earlier))
    out["start_command_id"] = derived.get("command_id")
    out["runs"] = derived.get("runs")
    activities = await pool.fetch(sql(WORKFLOW_ACTIVITIES, schema), workflow_id)
    out["activities"] = [run_row(r) for r in activities]
    runs = {a["run_id"]: a for a in out["activities"]}
    if out["last_sequence"] is None:
        _untyped(out, await _ticker_timers(pool, schema, workflow_id))
    else:
        _typed(out, derived, runs)
    out["history_length"] = await pool.fetchval(sql(WORKFLOW_HISTORY_LENGTH, schema), workflow_id)
    return out


async def _earlier_run(
    pool: Pool, schema: str, workflow_id: str, start_command_id: str
) -> WorkflowState | None:
    """The state of the run ``start_command_id`` began, folded from the history up to its end."""
    rows = await pool.fetch(sql(WORKFLOW_EVENTS_OF_ONE, schema), workflow_id)
    events = [recorded for recorded in map(stored_event, rows) if recorded is not None]
    history = run_history(events, start_command_id)
    return fold(history) if history is not None else None


def _run_columns(state: WorkflowState) -> dict[str, Any]:
    """The row's columns as the projection would have stored them for ``state``
    (`workflow_projection._store`): what an earlier run showed while it was the newest."""
    waiting_for, waiting_since = waiting_columns(state)
    return {
        "workflow_type": state.workflow_type,
        "input": state.input,
        "status": state.status,
        "rejection": None,
        "cancel_requested": state.cancel_requested,
        "cancel_reason": state.cancel_reason,
        "started_at": state.started_at,
        "updated_at": state.updated_at,
        "current_step": state.current_step,
        "last_sequence": state.last_sequence,
        "ended_at": state.ended_at,
        "waiting_for": waiting_for,
        "waiting_since": waiting_since,
        "memo": state.memo,
        "search_attributes": state.search_attributes,
    }


async def _ticker_timers(pool: Pool, schema: str, workflow_id: str) -> list[dict[str, Any]]:
    timers = await pool.fetch(
        sql(TICKER_TIMERS_OF, schema),
        workflow_id,
    )
    return [dict(t) for t in timers]


def _untyped(out: dict[str, Any], timers: list[dict[str, Any]]) -> None:
    """No typed history yet: what the commands, activity runs and timers alone tell."""
    out["steps"], out["compensations"], out["signals"], out["anomalies"] = [], [], [], []
    out["children"] = []
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
            "signal": timer.get("signal"),
        }
        for timer in derived.get("timers", [])
    ]
    out["pending_timers"] = [t for t in out["timers"] if t["status"] == "pending"]
    for name in ("children", "compensations", "signals", "anomalies"):
        out[name] = derived.get(name, [])
    for name in ("result", "error", "compensated", "non_determinism", "gap_at"):
        out[name] = derived.get(name)
    # A parked activity is a workflow waiting on a person: say so, and what they can do.
    parked = [step for step in steps if step["state"] == "parked"]
    out["waiting"], out["actions"] = None, []
    if parked and out["status"] not in _CLOSED_WORKFLOW_STATES:
        first = parked[0]
        reason = (first.get("error") or {}).get("dead_letter_reason") or "parked"
        out["waiting"] = f"activity parked: {first['activity']} #{first['sequence']} ({reason})"
        wid = quote(str(out["workflow_id"]), safe="")
        out["actions"] = [
            {
                "action": "retry_activity",
                "sequence": step["sequence"],
                "activity": step["activity"],
                "method": "POST",
                "path": f"/v1/workflows/{wid}/activities/{step['sequence']}/retry",
            }
            for step in parked
        ]


def history_row(row: asyncpg.Record) -> dict[str, Any]:
    """A workflow_history row as the api returns it."""
    out = dict(row)
    out["data"] = _loads(out["data"])
    out.pop("position", None)
    return out


async def workflow_history(
    pool: Pool, schema: str, workflow_id: str, *, limit: int, cursor: str | None, origin: str | None = None
) -> Page:
    """One page of a workflow's history entries in recorded order (of one origin if given)."""
    f = Filters()
    f.add("workflow_id = {}", workflow_id)
    if origin is not None:
        f.add("origin = {}", origin)
    if cursor is not None:
        at, position, entry_id = decode_cursor(cursor, (datetime, int, str))
        f.add("(at, COALESCE(sequence, 0), entry_id) > ({}, {}, {})", at, position, entry_id)
    rows, next_cursor = await _page(
        pool, WORKFLOW_HISTORY_PAGE, schema, f, limit, ("at", "position", "entry_id")
    )
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
    run_id: str | None = None,
    workflow_id: str | None = None,
) -> Page:
    """One page of dead letters matching the filters, newest status change first."""
    f = Filters()
    for column, value in (
        ("status", status),
        ("reason", reason),
        ("topic", topic),
        ("source_service", source),
        ("job_id", job_id),
        ("run_id", run_id),
        ("workflow_id", workflow_id),
    ):
        if value is not None:
            f.add(f"{column} = {{}}", value)
    if cursor is not None:
        at, dead_letter_id = decode_cursor(cursor, (datetime, str))
        f.add("(status_at, dead_letter_id) < ({}, {})", at, dead_letter_id)
    rows, next_cursor = await _page(
        pool, DEAD_LETTERS_PAGE, schema, f, limit, ("status_at", "dead_letter_id")
    )
    return Page([_dead_letter_row(r) for r in rows], next_cursor)


def selection_filters(f: Filters, selection: DeadLetterFilter, *, default_status: str | None) -> None:
    """``selection`` as conditions on the read model's `dead_letters`, as the dlq service matches
    it (`slotflow_dlq.queries.selection_sql`): a redrive or discard takes parked letters unless the
    selection names a status. The read model knows the first service that refused a letter, not
    every one (`seen_by`), so `source_service` matches that one."""
    if selection.ids:
        f.add("dead_letter_id = ANY ({}::text[])", list(selection.ids))
    status = selection.status or default_status
    if status is not None:
        f.add("status = {}", status)
    for column, value in (
        ("source_service", selection.source_service),
        ("topic", selection.topic),
        ("reason", selection.reason),
        ("job_id", selection.job_id),
        ("run_id", selection.run_id),
        ("workflow_id", selection.workflow_id),
    ):
        if value is not None:
            f.add(f"{column} = {{}}", value)
    if selection.since is not None:
        f.add("first_seen >= {}", selection.since)
    if selection.until is not None:
        f.add("first_seen < {}", selection.until)


#: Letters a preview lists (the rest are counted).
PREVIEW_ITEMS = 20


async def count_selection(
    pool: Pool, schema: str, selection: DeadLetterFilter, *, bulk: bool
) -> tuple[int, int]:
    """(letters a redrive or discard of ``selection`` would take, workflows' letters it leaves out)."""
    f = Filters(first=2)
    selection_filters(f, selection, default_status="parked")
    row = await pool.fetchrow(sql_with(DEAD_LETTER_SELECTION_COUNTS, schema, where=f.where()), bulk, *f.args)
    return (int(row["taken"]), int(row["left_out"])) if row is not None else (0, 0)


async def preview_dead_letters(
    pool: Pool,
    schema: str,
    *,
    action: str,
    selection: DeadLetterFilter,
    definition: RedriveDefinition,
    limit: int,
    kafka: KafkaSettings,
) -> dict[str, Any]:
    """What a redrive or discard of ``selection`` would do, without doing it: how many letters it
    would touch (at most ``limit``), the first of them with where each would go
    (`slotflow.redrive.route`, as the dlq routes it), and what a bulk redrive leaves out."""
    bulk = action == "redrive" and not selection.ids
    total, left_out = await count_selection(pool, schema, selection, bulk=bulk)
    f = Filters(first=2)
    selection_filters(f, selection, default_status="parked")
    rows = await pool.fetch(
        sql_with(DEAD_LETTER_SELECTION_TAKEN, schema, where=f.where(), limit=f.param(limit)), bulk, *f.args
    )
    topics = {spec.name: spec for spec in kafka.topics()}
    targets: dict[str, int] = {}
    refused = 0
    items: list[dict[str, Any]] = []
    for row in rows:
        item = _dead_letter_row(row)
        if action == "redrive":
            facts = LetterFacts(
                topic=row["topic"],
                partition=row["partition"] if row["partition"] is not None else -1,
                source_service=row["source_service"],
                reason=row["reason"],
                run_id=row["run_id"],
                workflow_id=row["workflow_id"],
                sequence=row["sequence"],
            )
            routed = route(facts, definition=definition, topics=topics, jobs_due=kafka.topic(JOBS_DUE))
            if isinstance(routed, Unroutable):
                refused += 1
                item["owner"], item["refusal"], item["kind"] = None, routed.reason, None
            else:
                targets[routed.target] = targets.get(routed.target, 0) + 1
                item["owner"], item["refusal"], item["kind"] = routed.target, None, routed.kind
        if len(items) < PREVIEW_ITEMS:
            items.append(item)
    return {
        "action": action,
        "dry_run": True,
        "would_touch": len(rows),
        "matching": total,
        "limit": limit,
        "definition": definition if action == "redrive" else None,
        "owners": targets,
        "refused": refused,
        "left_out": left_out,
        "left_out_reason": (
            "workflows' parked activities: retried only through their workflow (RetryActivity, or a "
            "redrive naming the letter by id)"
            if left_out
            else None
        ),
        "items": items,
    }


def _dead_letter_row(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["tags"] = list(out["tags"])
    return out


async def get_dead_letter(pool: Pool, schema: str, dead_letter_id: str) -> dict[str, Any] | None:
    """One dead letter with its run's attempts and the last traceback, or None."""
    row = await pool.fetchrow(sql(DEAD_LETTER_BY_ID, schema), dead_letter_id)
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
    """One command's row (its status, the acknowledgement's reason), or None."""
    row = await pool.fetchrow(sql(COMMAND_BY_ID, schema), command_id)
    return dict(row) if row is not None else None


async def list_commands(
    pool: Pool,
    schema: str,
    *,
    subject: str | None,
    command_type: str | None,
    principal: str | None,
    limit: int,
    cursor: str | None,
) -> Page:
    """One page of commands (who issued what, when, and how it ended), newest first."""
    f = Filters()
    for column, value in (("subject", subject), ("command_type", command_type), ("principal", principal)):
        if value is not None:
            f.add(f"{column} = {{}}", value)
    if cursor is not None:
        at, command_id = decode_cursor(cursor, (datetime, str))
        f.add("(published_at, command_id) < ({}, {})", at, command_id)
    rows, next_cursor = await _page(pool, COMMANDS_PAGE, schema, f, limit, ("published_at", "command_id"))
    return Page([dict(r) for r in rows], next_cursor)


async def claimers(pool: Pool, schema: str) -> list[dict[str, Any]]:
    """Every claimer's newest announcement, with whether it is live by the database clock (its
    last announcement younger than three of its intervals)."""
    rows = await pool.fetch(sql(LIST_CLAIMERS, schema))
    return [{**dict(row), "handlers": list(row["handlers"])} for row in rows]


async def database_now(pool: Pool) -> datetime:
    """The database clock (`now()`), which every decision about time uses."""
    value = await pool.fetchval(DATABASE_NOW)
    if not isinstance(value, datetime):
        raise TypeError("now() did not return a timestamp")
    return value


# -- audit inputs -------------------------------------------------------------------------------


async def schedule_changes(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Who created, updated, paused, resumed or deleted the schedule in [start, end), and when."""
    rows = await pool.fetch(sql(SCHEDULE_CHANGES_OF, schema), schedule_id, start, end)
    return [
        {"at": r["at"], "change": r["change"], "by": r["principal"], "command_id": r["command_id"]}
        for r in rows
    ]


async def audit_inputs(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> tuple[list[asyncpg.Record], list[asyncpg.Record], list[asyncpg.Record]]:
    """The schedule's timeline, its runs in [start, end) with completing tokens, its skipped slots."""
    timeline = await pool.fetch(
        sql(SCHEDULE_TIMELINE_OF, schema),
        schedule_id,
    )
    runs = await pool.fetch(
        sql(RUNS_IN_RANGE, schema),
        schedule_id,
        start,
        end,
    )
    skips = await pool.fetch(
        sql(SKIPPED_IN_RANGE, schema),
        schedule_id,
        start,
        end,
    )
    return list(timeline), list(runs), list(skips)


async def slot_repairs(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> list[asyncpg.Record]:
    """Who re-ran or marked which slot of the schedule in [start, end), when and why."""
    return list(await pool.fetch(sql(REPAIRS_IN_RANGE, schema), schedule_id, start, end))


# -- backfills in flight ------------------------------------------------------------------------


async def backfills_in_flight(conn: Conn, schema: str, schedule_id: str, *, besides: str = "") -> int:
    """How many backfills of ``schedule_id`` are in flight (``besides`` not counted)."""
    return int(await conn.fetchval(sql(COUNT_BACKFILLS_IN_FLIGHT, schema), schedule_id, besides))


async def lock_backfills(conn: Conn, schedule_id: str) -> None:
    """Hold the schedule's backfill lock until ``conn``'s transaction ends."""
    await conn.execute(LOCK_BACKFILLS, schedule_id)


async def record_backfill(
    conn: Conn, schema: str, *, command_id: str, schedule_id: str, start: datetime, end: datetime
) -> None:
    """Count a just-published Backfill at once, before the projector sees it on its topic."""
    await conn.execute(sql(RECORD_BACKFILL, schema), command_id, schedule_id, start, end)


# -- downstreams --------------------------------------------------------------------------------


def _downstream(row: asyncpg.Record) -> dict[str, Any]:
    out = dict(row)
    out["settings"] = json.loads(row["settings"])
    allowance, retries = row["retry_allowance"], row["retries"]
    out["budget_used"] = (
        None if allowance is None or retries is None else (retries / allowance if allowance else 1.0)
    )
    return out


async def downstreams(pool: Pool, schema: str) -> list[dict[str, Any]]:
    """Every downstream the claimers have reported, by name."""
    rows = await pool.fetch(sql(LIST_DOWNSTREAMS, schema))
    counts = {r["name"]: int(r["n"]) for r in await pool.fetch(sql(HELD_COUNTS, schema))}
    out = [_downstream(row) for row in rows]
    for item in out:
        item["held_runs_count"] = counts.get(item["name"], 0)
    return out


async def downstream(pool: Pool, schema: str, name: str) -> dict[str, Any] | None:
    """One downstream with its latest changes and the runs held for it, in slot order."""
    row = await pool.fetchrow(sql(DOWNSTREAM_BY_NAME, schema), name)
    if row is None:
        return None
    out = _downstream(row)
    changes = await pool.fetch(sql(DOWNSTREAM_CHANGES, schema), name)
    out["changes"] = [dict(c) for c in changes]
    held = await pool.fetch(sql(HELD_RUNS, schema), name)
    out["held_runs"] = [dict(h) for h in held]
    counts = {r["name"]: int(r["n"]) for r in await pool.fetch(sql(HELD_COUNTS, schema))}
    out["held_runs_count"] = counts.get(name, 0)
    return out
