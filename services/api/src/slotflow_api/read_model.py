"""Queries over the read model. Every list is keyset-paginated: the cursor is the last row's sort key.

Keyset (not OFFSET) pagination keeps each page one index range scan however deep the client goes,
and a row inserted while a client pages cannot make it see a row twice.
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
from slotflow.history.fold import TERMINAL_STATUSES
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import Filters, compose, sql, sql_with
from slotflow.redrive import LetterFacts, Unroutable, route
from slotflow.settings import KafkaSettings


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


#: What a list of schedules needs to answer "is this healthy?": the newest run (by slot) and the
#: failure streak, the runs that ended dead-lettered or failed since the newest completed one
#: (runs still in flight and skipped ones neither break nor extend it). Both walk the
#: (job_id, slot) index backwards from the newest run, so a page costs one short scan per row.
_HEALTH_COLUMNS = (
    "last.run_id AS last_run_id, last.slot AS last_run_slot, last.state AS last_run_state, "
    "last.finished_at AS last_run_finished_at, "
    "(SELECT count(*) FROM {schema}.runs f WHERE f.job_id = s.schedule_id "
    "AND f.state IN ('dead_lettered', 'failed') AND f.slot > COALESCE((SELECT max(c.slot) "
    "FROM {schema}.runs c WHERE c.job_id = s.schedule_id AND c.state = 'completed'), "
    "'-infinity')) AS failure_streak"
)
_LAST_RUN_JOIN = (
    "LEFT JOIN LATERAL (SELECT r.run_id, r.slot, r.state, r.finished_at FROM {schema}.runs r "
    "WHERE r.job_id = s.schedule_id ORDER BY r.slot DESC, r.run_id DESC LIMIT 1) last ON true"
)

# Reads run without locks in their own statement; a page is a keyset range (`{where}` ends with
# the cursor's condition, `{limit}` asks one row more to learn whether a page follows).
_SCHEDULES_PAGE = compose(
    "SELECT {columns}, {health} FROM {schema}.schedules s {joined} WHERE {where} "
    "ORDER BY schedule_id LIMIT {limit}",
    columns=_SCHEDULE_COLUMNS,
    health=_HEALTH_COLUMNS,
    joined=_LAST_RUN_JOIN,
)
_SCHEDULE = compose(
    "SELECT {columns}, {health} FROM {schema}.schedules s {joined} WHERE schedule_id = $1",
    columns=_SCHEDULE_COLUMNS,
    health=_HEALTH_COLUMNS,
    joined=_LAST_RUN_JOIN,
)
# Every schedule not deleted, by id, at most $1 (the calendar's input).
_LIVE_SCHEDULES = compose(
    "SELECT {columns} FROM {schema}.schedules s WHERE NOT deleted ORDER BY schedule_id LIMIT $1",
    columns=_SCHEDULE_COLUMNS,
)


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
    rows, next_cursor = await _page(pool, _SCHEDULES_PAGE, schema, f, limit, ("schedule_id",))
    return Page([with_health(schedule_row(r)) for r in rows], next_cursor)


async def live_schedules(pool: Pool, schema: str, *, limit: int) -> list[dict[str, Any]]:
    """Every schedule not deleted, by id, at most ``limit`` (the calendar's input)."""
    rows = await pool.fetch(sql(_LIVE_SCHEDULES, schema), limit)
    return [schedule_row(r) for r in rows]


# How many of a schedule's runs are in each state.
_RUN_COUNTS_BY_STATE = "SELECT state, count(*) AS n FROM {schema}.runs WHERE job_id = $1 GROUP BY state"


async def get_schedule(pool: Pool, schema: str, schedule_id: str) -> dict[str, Any] | None:
    """One schedule with its health and how many of its runs are in each state, or None."""
    row = await pool.fetchrow(sql(_SCHEDULE, schema), schedule_id)
    if row is None:
        return None
    out = with_health(schedule_row(row))
    counts = await pool.fetch(sql(_RUN_COUNTS_BY_STATE, schema), schedule_id)
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


# A page by slot, then run id (the cursor's key), in the asked direction; one run with detail; a
# workflow's activities in sequence order.
_RUNS_PAGE = compose(
    "{run_select} WHERE {where} ORDER BY r.slot {order}, r.run_id {order} LIMIT {limit}",
    run_select=compose(_RUN_SELECT, detail=""),
)
_RUN = compose("{run_select} WHERE r.run_id = $1", run_select=compose(_RUN_SELECT, detail=_ATTEMPT_DETAIL))
_ACTIVITIES = compose(
    "{run_select} WHERE r.workflow_id = $1 ORDER BY r.sequence, r.slot",
    run_select=compose(_RUN_SELECT, detail=""),
)


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
    rows, next_cursor = await _page(pool, _RUNS_PAGE, schema, f, limit, ("slot", "run_id"), order=order)
    return Page([run_row(r) for r in rows], next_cursor)


# The backfilled runs of a schedule in [start, end): the backfill route's progress.
# Every run of the schedule's slots in [start, end), whichever kind made it: a backfill's JobDue has
# the run id its slot always has (`{job}@{slot}`), so over a slot that already ran it collapses into
# that run and creates nothing. Forced re-runs (`#rerun-n`) have run ids of their own and are not
# among the slots' runs.
_BACKFILL_STATES = "SELECT run_id, state FROM {schema}.runs WHERE job_id = $1 AND slot >= $2 AND slot < $3"


async def backfill_states(
    pool: Pool, schema: str, job_id: str, start: datetime, end: datetime
) -> dict[str, str]:
    """Run id -> state of the schedule's runs with slot in [start, end), however they came."""
    rows = await pool.fetch(
        sql(_BACKFILL_STATES, schema),
        job_id,
        start,
        end,
    )
    return {row["run_id"]: row["state"] for row in rows}


async def get_run(pool: Pool, schema: str, run_id: str) -> dict[str, Any] | None:
    """One run with every attempt, its traceback and log lines, or None."""
    row = await pool.fetchrow(sql(_RUN, schema), run_id)
    return run_row(row, detail=True) if row is not None else None


# -- workflows ----------------------------------------------------------------------------------

# Without typed history the newest activity run is the best guess at the current step.
_WORKFLOW_SELECT = """
SELECT w.workflow_id, w.workflow_type, w.input, w.status, w.cancel_requested, w.cancel_reason,
       w.requested_at, w.updated_at, w.last_sequence, w.started_at, w.ended_at, w.derived,
       w.rejection, w.waiting_for, w.waiting_since,
       COALESCE(w.requested_at, w.updated_at) AS sort_at,
       CASE WHEN w.last_sequence IS NOT NULL THEN w.current_step ELSE
       (SELECT r.handler FROM {schema}.runs r WHERE r.workflow_id = w.workflow_id
         ORDER BY r.sequence DESC NULLS LAST, r.slot DESC LIMIT 1) END AS current_step
  FROM {schema}.workflows w
"""


# A page newest request first, then by id (the cursor's key); one workflow.
_WORKFLOWS_PAGE = compose(
    "{workflow_select} WHERE {where} ORDER BY COALESCE(w.requested_at, w.updated_at) DESC, w.workflow_id DESC "
    "LIMIT {limit}",
    workflow_select=_WORKFLOW_SELECT,
)
_WORKFLOW = compose("{workflow_select} WHERE w.workflow_id = $1", workflow_select=_WORKFLOW_SELECT)


# The attention filter: the workflows an operator should look at, one condition per reason, ORed
# (each `{}` is the age a wait must pass, on the database clock). A new reason is one more entry.
ATTENTION_REASONS = (
    # stuck: a replay diverged, and nothing moves until code matching its history is deployed
    "w.status = 'stuck'",
    # only a signal can move it (the fold's `waiting`), and none came for longer than the age
    "(w.waiting_for LIKE 'signal%' AND w.waiting_since < now() - {}::interval)",
    # waiting on a parked activity (a step of the fold's `steps` in state `parked`): the claimers
    # gave up on it, and only a person's retry (RetryActivity) moves it, so no age applies; a
    # closed workflow waits on nothing
    "(w.status IN ('running', 'compensating') AND EXISTS (SELECT 1 FROM "
    "jsonb_array_elements(w.derived -> 'steps') AS step WHERE step ->> 'state' = 'parked'))",
)


#: `ATTENTION_REASONS` as one condition of a list's filter.
_ATTENTION = "(" + " OR ".join(ATTENTION_REASONS) + ")"


def workflow_row(row: asyncpg.Record) -> dict[str, Any]:
    """A workflows row as the api returns it (the folded details left out)."""
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
    attention: timedelta | None = None,
) -> Page:
    """One page of workflows matching the filters, newest request first. ``attention``: only the
    workflows that need an operator (`ATTENTION_REASONS`), waits counted past that age."""
    f = Filters()
    if workflow_type is not None:
        f.add("w.workflow_type = {}", workflow_type)
    if status is not None:
        f.add("w.status = {}", status)
    if attention is not None:
        f.add(_ATTENTION, *[attention] * _ATTENTION.count("{}"))
    if start is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) >= {}", start)
    if end is not None:
        f.add("COALESCE(w.requested_at, w.updated_at) < {}", end)
    if cursor is not None:
        at, workflow_id = decode_cursor(cursor, (datetime, str))
        f.add("(COALESCE(w.requested_at, w.updated_at), w.workflow_id) < ({}, {})", at, workflow_id)
    rows, next_cursor = await _page(pool, _WORKFLOWS_PAGE, schema, f, limit, ("sort_at", "workflow_id"))
    return Page([workflow_row(r) for r in rows], next_cursor)


# -- a bulk cancel or terminate: the workflows a selection takes ----------------------------------

# The selected workflows, oldest request first, each with its status and whether a cancel was
# already requested. Read-only: the route publishes one command per workflow from this answer, and
# the orchestrator rejects a command to a workflow that ended since (a race costs a rejected
# command, never a second effect: cancel and terminate are idempotent on an ended workflow).
_WORKFLOW_SELECTION = (
    "SELECT w.workflow_id, w.workflow_type, w.status, w.cancel_requested FROM {schema}.workflows w "
    "WHERE {where} ORDER BY COALESCE(w.requested_at, w.updated_at), w.workflow_id LIMIT {limit}"
)
# How many selected workflows are in each status (what the preview says it leaves out and why).
_WORKFLOW_SELECTION_COUNTS = (
    "SELECT w.status, w.cancel_requested, count(*) AS n FROM {schema}.workflows w WHERE {where} "
    "GROUP BY w.status, w.cancel_requested"
)
# Which of the named ids the read model knows (the others are left out: nothing says they exist).
_KNOWN_WORKFLOW_IDS = "SELECT workflow_id FROM {schema}.workflows WHERE workflow_id = ANY($1::text[])"


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
        sql_with(_WORKFLOW_SELECTION_COUNTS, schema, where=counting.where()), *counting.args
    )
    taking = selection.filters()
    taking.add("w.status = ANY({}::text[])", sorted(takeable))
    if not cancel_requested_too:
        taking.add("NOT w.cancel_requested")
    limit_param = taking.param(limit)
    rows = await pool.fetch(
        sql_with(_WORKFLOW_SELECTION, schema, where=taking.where(), limit=limit_param), *taking.args
    )
    leaving = selection.filters()
    leaving.add(
        "NOT (w.status = ANY({}::text[]) AND (NOT w.cancel_requested OR {}))",
        sorted(takeable),
        cancel_requested_too,
    )
    shown_param = leaving.param(shown)
    left_out = await pool.fetch(
        sql_with(_WORKFLOW_SELECTION, schema, where=leaving.where(), limit=shown_param), *leaving.args
    )
    unknown: list[str] = []
    if selection.workflow_ids:
        known = {
            r["workflow_id"]
            for r in await pool.fetch(sql(_KNOWN_WORKFLOW_IDS, schema), list(selection.workflow_ids))
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


# How many history entries a workflow has.
_HISTORY_LENGTH = "SELECT count(*) FROM {schema}.workflow_history WHERE workflow_id = $1"


async def get_workflow(pool: Pool, schema: str, workflow_id: str) -> dict[str, Any] | None:
    """One workflow with its activities, timers and the state folded from its history, or None."""
    row = await pool.fetchrow(sql(_WORKFLOW, schema), workflow_id)
    if row is None:
        return None
    derived: dict[str, Any] = _loads(row["derived"]) or {}
    out = workflow_row(row)
    activities = await pool.fetch(sql(_ACTIVITIES, schema), workflow_id)
    out["activities"] = [run_row(r) for r in activities]
    runs = {a["run_id"]: a for a in out["activities"]}
    if row["last_sequence"] is None:
        _untyped(out, await _ticker_timers(pool, schema, workflow_id))
    else:
        _typed(out, derived, runs)
    out["history_length"] = await pool.fetchval(sql(_HISTORY_LENGTH, schema), workflow_id)
    return out


_TICKER_TIMERS = (
    "SELECT * FROM {schema}.timers WHERE owner = $1 AND action = 'timer_fired' ORDER BY fire_at, timer_id"
)


async def _ticker_timers(pool: Pool, schema: str, workflow_id: str) -> list[dict[str, Any]]:
    timers = await pool.fetch(
        sql(_TICKER_TIMERS, schema),
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


# Events recorded in the same instant keep their history order (sequence), not the id's text order.
_HISTORY_PAGE = """
SELECT *, COALESCE(sequence, 0) AS position FROM {schema}.workflow_history WHERE {where}
 ORDER BY at, COALESCE(sequence, 0), entry_id LIMIT {limit}
"""


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
    rows, next_cursor = await _page(pool, _HISTORY_PAGE, schema, f, limit, ("at", "position", "entry_id"))
    return Page([history_row(r) for r in rows], next_cursor)


# -- dead letters and commands ------------------------------------------------------------------


# A dead letter with who last redrove or discarded it (`changed_by`: the principal of the command
# that changed it, when the api published that command and the command has been projected).
_DEAD_LETTER_SELECT = (
    "SELECT d.*, c.principal AS changed_by FROM {schema}.dead_letters d "
    "LEFT JOIN {schema}.commands c ON c.command_id = d.command_id"
)
# A page newest status change first, then by id (the cursor's key). The filters name the dead
# letter's own columns, so they apply to the joined row as a whole.
_DEAD_LETTERS_PAGE = compose(
    "SELECT * FROM ({dead_letter_select}) x WHERE {where} ORDER BY status_at DESC, dead_letter_id DESC "
    "LIMIT {limit}",
    dead_letter_select=_DEAD_LETTER_SELECT,
)


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
        pool, _DEAD_LETTERS_PAGE, schema, f, limit, ("status_at", "dead_letter_id")
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


# How many letters a selection (`{where}`) holds: those a redrive or discard takes, and the
# workflows' parked activities among them (a bulk redrive leaves them out: `$1`).
_SELECTION_COUNTS = """
SELECT count(*) FILTER (WHERE NOT ($1::boolean AND workflow_id IS NOT NULL)) AS taken,
       count(*) FILTER (WHERE $1::boolean AND workflow_id IS NOT NULL) AS left_out
  FROM {schema}.dead_letters WHERE {where}
"""
# The letters a redrive or discard takes, in the order the dlq takes them (oldest first), at most
# `{limit}` (the command's own limit: what it would touch).
_SELECTION_TAKEN = """
SELECT * FROM {schema}.dead_letters
 WHERE {where} AND NOT ($1::boolean AND workflow_id IS NOT NULL)
 ORDER BY first_seen, dead_letter_id LIMIT {limit}
"""
#: Letters a preview lists (the rest are counted).
PREVIEW_ITEMS = 20


async def count_selection(
    pool: Pool, schema: str, selection: DeadLetterFilter, *, bulk: bool
) -> tuple[int, int]:
    """(letters a redrive or discard of ``selection`` would take, workflows' letters it leaves out)."""
    f = Filters(first=2)
    selection_filters(f, selection, default_status="parked")
    row = await pool.fetchrow(sql_with(_SELECTION_COUNTS, schema, where=f.where()), bulk, *f.args)
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
        sql_with(_SELECTION_TAKEN, schema, where=f.where(), limit=f.param(limit)), bulk, *f.args
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


# One dead letter by its primary key.
_DEAD_LETTER = compose(
    "{dead_letter_select} WHERE d.dead_letter_id = $1", dead_letter_select=_DEAD_LETTER_SELECT
)


async def get_dead_letter(pool: Pool, schema: str, dead_letter_id: str) -> dict[str, Any] | None:
    """One dead letter with its run's attempts and the last traceback, or None."""
    row = await pool.fetchrow(sql(_DEAD_LETTER, schema), dead_letter_id)
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


# One command by its primary key (its status, the acknowledgement's reason).
_COMMAND = "SELECT * FROM {schema}.commands WHERE command_id = $1"


async def get_command(pool: Pool, schema: str, command_id: str) -> dict[str, Any] | None:
    """One command's row (its status, the acknowledgement's reason), or None."""
    row = await pool.fetchrow(sql(_COMMAND, schema), command_id)
    return dict(row) if row is not None else None


# A page newest publication first, then by id (the cursor's key, index commands_by_publication).
# Rows only acknowledged so far (the command itself not projected yet) have no publication time
# and wait until it is.
_COMMANDS_PAGE = (
    "SELECT command_id, command_type, subject, status, reason, principal, source, published_at, "
    "acknowledged_at FROM {schema}.commands WHERE published_at IS NOT NULL AND {where} "
    "ORDER BY published_at DESC, command_id DESC LIMIT {limit}"
)


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
    rows, next_cursor = await _page(pool, _COMMANDS_PAGE, schema, f, limit, ("published_at", "command_id"))
    return Page([dict(r) for r in rows], next_cursor)


# A claimer is live while its newest announcement is younger than three of its intervals, by the
# database clock.
_CLAIMERS = (
    "SELECT claimer_id, handlers, interval_ms, started_at, announced_at, "
    "announced_at > now() - make_interval(secs => 3 * interval_ms / 1000.0) AS live "
    "FROM {schema}.claimers ORDER BY claimer_id"
)


async def claimers(pool: Pool, schema: str) -> list[dict[str, Any]]:
    """Every claimer's newest announcement, with whether it is live by the database clock (its
    last announcement younger than three of its intervals)."""
    rows = await pool.fetch(sql(_CLAIMERS, schema))
    return [{**dict(row), "handlers": list(row["handlers"])} for row in rows]


async def database_now(pool: Pool) -> datetime:
    """The database clock (`now()`), which every decision about time uses."""
    value = await pool.fetchval("SELECT now()")
    if not isinstance(value, datetime):
        raise TypeError("now() did not return a timestamp")
    return value


# -- audit inputs -------------------------------------------------------------------------------


# The audit's inputs: the schedule's timeline in the order its changes happened, its runs and
# skipped slots in [start, end).
# A schedule's changes in [$2, $3) with who asked for each: the ticker names each change event
# `<command id>/<change>` (`fit_id`; `#paused` added for a create that starts paused), so the
# command, and its principal, is found by cutting that suffix off. A change whose command id was
# too long to keep whole in the event id finds no command: `by` is then null.
_CHANGES_OF = """
SELECT t.at, t.change, c.command_id, c.principal
  FROM {schema}.schedule_timeline t
  LEFT JOIN {schema}.commands c
    ON c.command_id = regexp_replace(t.event_id, '/(created|updated|paused|resumed|deleted)(#paused)?$', '')
 WHERE t.schedule_id = $1 AND t.at >= $2 AND t.at < $3
 ORDER BY t.at, t.position, t.event_id
"""


async def schedule_changes(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Who created, updated, paused, resumed or deleted the schedule in [start, end), and when."""
    rows = await pool.fetch(sql(_CHANGES_OF, schema), schedule_id, start, end)
    return [
        {"at": r["at"], "change": r["change"], "by": r["principal"], "command_id": r["command_id"]}
        for r in rows
    ]


_TIMELINE_OF = (
    "SELECT at, change, definition FROM {schema}.schedule_timeline WHERE schedule_id = $1 "
    "ORDER BY at, position, event_id"
)


#: Each run's completing fence tokens: two tokens are one run's effect happening twice.
_RUNS_IN_RANGE = """
SELECT r.run_id, r.slot, r.kind, r.state, r.produced_at, r.fire_at, r.completions, r.finished_at,
       COALESCE((SELECT array_agg(a.fence_token ORDER BY a.fence_token) FROM {schema}.run_attempts a
                  WHERE a.run_id = r.run_id AND a.completed), '{}') AS tokens,
       -- a run that waited for a downstream is judged by when it completed (audit `held`/`late`)
       EXISTS (SELECT 1 FROM {schema}.run_attempts a
                WHERE a.run_id = r.run_id AND a.outcome = 'held') AS was_held,
       r.error->>'held_reason' AS held_reason
  FROM {schema}.runs r WHERE r.job_id = $1 AND r.slot >= $2 AND r.slot < $3
"""


_SKIPPED_IN_RANGE = (
    "SELECT slot, run_id, reason, detail FROM {schema}.skipped_slots "
    "WHERE schedule_id = $1 AND slot >= $2 AND slot < $3"
)


async def audit_inputs(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> tuple[list[asyncpg.Record], list[asyncpg.Record], list[asyncpg.Record]]:
    """The schedule's timeline, its runs in [start, end) with completing tokens, its skipped slots."""
    timeline = await pool.fetch(
        sql(_TIMELINE_OF, schema),
        schedule_id,
    )
    runs = await pool.fetch(
        sql(_RUNS_IN_RANGE, schema),
        schedule_id,
        start,
        end,
    )
    skips = await pool.fetch(
        sql(_SKIPPED_IN_RANGE, schema),
        schedule_id,
        start,
        end,
    )
    return list(timeline), list(runs), list(skips)


# An operator's re-runs and marks of the schedule's slots in [start, end), oldest first.
_REPAIRS_IN_RANGE = """
SELECT slot, at, action, run_id, principal, reason FROM {schema}.slot_repairs
 WHERE schedule_id = $1 AND slot >= $2 AND slot < $3
 ORDER BY at, event_id, slot
"""


async def slot_repairs(
    pool: Pool, schema: str, schedule_id: str, start: datetime, end: datetime
) -> list[asyncpg.Record]:
    """Who re-ran or marked which slot of the schedule in [start, end), when and why."""
    return list(await pool.fetch(sql(_REPAIRS_IN_RANGE, schema), schedule_id, start, end))


# -- backfills in flight ------------------------------------------------------------------------

#: A schedule's backfills still in flight, leaving out ``$2`` (a client retrying its own command).
#: In flight: not rejected, and not answered by the ticker yet, or accepted less than 10 s ago
#: (its JobDues travel on another topic than its acceptance, so the projector may show its runs a
#: little later), or with a run of its range not finished. The api takes the schedule's advisory
#: lock (`LOCK_BACKFILLS`) around this count and the row `RECORD_BACKFILL` writes, so two requests
#: cannot both pass on the same count.
COUNT_BACKFILLS_IN_FLIGHT = """
SELECT count(*) FROM {schema}.commands c
 WHERE c.subject = $1 AND c.range_start IS NOT NULL AND c.command_id <> $2
   AND c.status <> 'rejected'
   AND (c.status <> 'accepted' OR c.acknowledged_at > now() - interval '10 seconds' OR EXISTS (
        SELECT 1 FROM {schema}.runs r
         WHERE r.job_id = c.subject AND r.slot >= c.range_start AND r.slot < c.range_end
           AND r.state NOT IN ('completed', 'dead_lettered', 'skipped')
           -- a run cancelled by a newer one (cancel_previous) ends on its RunFailed
           AND NOT (r.state = 'failed' AND r.error->>'type' = 'RunCancelled')))
"""

#: One backfill request at a time per schedule (per database: every api replica agrees).
LOCK_BACKFILLS = "SELECT pg_advisory_xact_lock(hashtextextended('slotflow.api.backfills:' || $1, 0))"

#: The published Backfill, counted at once: the projector sees it on its topic only later, and
#: fills in the rest of the row (its source, when it was published, the ticker's answer).
RECORD_BACKFILL = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, range_start, range_end)
VALUES ($1, 'schedule.backfill', $2, 'pending', $3, $4)
ON CONFLICT (command_id) DO UPDATE SET
    range_start = COALESCE(commands.range_start, EXCLUDED.range_start),
    range_end = COALESCE(commands.range_end, EXCLUDED.range_end)
"""


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

_DOWNSTREAM_COLUMNS = (
    "name, state, manual, settings::text AS settings, held, window_seconds, first_attempts, retries, "
    "retry_allowance, successes, failures, changed_at, reported_at"
)
# What the claimers last reported of each downstream (a projection of their events).
_DOWNSTREAMS = compose(
    "SELECT {columns} FROM {schema}.downstreams ORDER BY name", columns=_DOWNSTREAM_COLUMNS
)
_DOWNSTREAM = compose(
    "SELECT {columns} FROM {schema}.downstreams WHERE name = $1", columns=_DOWNSTREAM_COLUMNS
)
# The newest 50 changes of one downstream's circuit, newest first.
_DOWNSTREAM_CHANGES = (
    "SELECT from_state, to_state, cause, reason, manual, by_claimer, command_id, held, at "
    "FROM {schema}.downstream_changes WHERE name = $1 ORDER BY at DESC, event_id DESC LIMIT 50"
)
# Which downstream a held run waits for: its reason names it after the colon ("circuit_open:bank-api").
_HELD_FOR = "substr(r.error->>'held_reason', strpos(r.error->>'held_reason', ':') + 1)"
# How many runs the read model holds as held, per downstream: the same rows _HELD_RUNS lists, so
# a count shown beside them is theirs (the claimers' reported `held` is another moment's figure:
# a header of 8 above 9 rows).
_HELD_COUNTS = compose(
    """
SELECT {held_for} AS name, count(*) AS n
  FROM {schema}.runs r
 WHERE r.state = 'held'
 GROUP BY 1
""",
    held_for=_HELD_FOR,
)
# The runs held for downstream $1, in slot order: a held run names its downstream after the colon
# of its reason ("circuit_open:bank-api").
_HELD_RUNS = """
SELECT r.run_id, r.job_id, r.slot, r.attempt, r.error->>'held_reason' AS held_reason,
       (SELECT max(a.retry_at) FROM {schema}.run_attempts a WHERE a.run_id = r.run_id) AS retry_at
  FROM {schema}.runs r
 WHERE r.state = 'held'
   AND substr(r.error->>'held_reason', strpos(r.error->>'held_reason', ':') + 1) = $1
 ORDER BY r.slot, r.job_id LIMIT 100
"""


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
    rows = await pool.fetch(sql(_DOWNSTREAMS, schema))
    counts = {r["name"]: int(r["n"]) for r in await pool.fetch(sql(_HELD_COUNTS, schema))}
    out = [_downstream(row) for row in rows]
    for item in out:
        item["held_runs_count"] = counts.get(item["name"], 0)
    return out


async def downstream(pool: Pool, schema: str, name: str) -> dict[str, Any] | None:
    """One downstream with its latest changes and the runs held for it, in slot order."""
    row = await pool.fetchrow(sql(_DOWNSTREAM, schema), name)
    if row is None:
        return None
    out = _downstream(row)
    changes = await pool.fetch(sql(_DOWNSTREAM_CHANGES, schema), name)
    out["changes"] = [dict(c) for c in changes]
    held = await pool.fetch(sql(_HELD_RUNS, schema), name)
    out["held_runs"] = [dict(h) for h in held]
    counts = {r["name"]: int(r["n"]) for r in await pool.fetch(sql(_HELD_COUNTS, schema))}
    out["held_runs_count"] = counts.get(name, 0)
    return out
