"""Turn a batch of decoded events into read-model rows, inside the caller's transaction.

Two rules make the read model rebuildable with the same result whatever the interleaving of
partitions and batches:

- Events of one key arrive in order (one partition), so per-key state (a schedule, a dead letter)
  is applied in record order.
- Facts about one run or timer come from several topics (JobDue on the jobs topic, run events on
  the runs topic, retries via the commands topic), so those projections are commutative: each
  fact is its own row or merges with a monotone rule (highest rank, earliest start, latest
  finish), and a run's state is derived from all of its facts after every batch.
"""

import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slotflow.contracts import (
    Backfill,
    CancelTimer,
    CancelWorkflow,
    ClaimerAnnounced,
    CommandAccepted,
    CommandRejected,
    DeadLetterStatusChanged,
    DownstreamChanged,
    DownstreamReported,
    Envelope,
    FireTimerFired,
    HistoryEvent,
    JobDue,
    Message,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
    SignalWorkflow,
    SlotSkipped,
    SlotsMarked,
    SlotsRerun,
    StartTimer,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
)
from slotflow.contracts.catalogue import (
    DLQ_COMMAND_TYPES,
    DOWNSTREAM_COMMAND_TYPES,
    RUN_EVENT_TYPES,
    TICKER_COMMAND_TYPES,
    WORKFLOW_COMMAND_TYPES,
)
from slotflow.contracts.runs import RunEvent
from slotflow.contracts.topics import TIMER_COMMANDS, WORKFLOW_HISTORY
from slotflow.core.nul import scrub_nul
from slotflow.kafka.records import Record
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql
from slotflow_api.retention import forget_purged
from slotflow_api.workflow_projection import record_event, refold

#: Command types whose consumer acknowledges them (CommandAccepted/CommandRejected); the others
#: stay `published` once seen on their topic.
#: The DLQ service acknowledges its commands too (CommandAccepted on its events topic, staged with
#: the status changes): until then a redrive is `pending`, so `?wait=` waits for the DLQ's answer.
ACKNOWLEDGED_COMMANDS = frozenset(
    m.message_type
    for m in (*TICKER_COMMAND_TYPES, *WORKFLOW_COMMAND_TYPES, *DLQ_COMMAND_TYPES, *DOWNSTREAM_COMMAND_TYPES)
)

#: Outcome rank per claim: a later fact about the same claim can only raise it.
#: `held` is a retry that waits for a downstream (RunRetrying with a held_reason): nothing ran.
RANKS = {
    "running": 1,
    "failed": 2,
    "retrying": 3,
    "held": 3,
    "skipped": 4,
    "dead_lettered": 4,
    "completed": 5,
}
TIMER_RANKS = {"pending": 1, "cancelled": 2, "fired": 3}


@dataclass(frozen=True, slots=True)
class Fact:
    """One decoded record and the topic-table name (not the namespaced name) it came from."""

    topic: str
    record: Record
    envelope: Envelope
    message: Message

    @property
    def dedupe_id(self) -> str:
        """What makes this event unique: its id, and for run events also the claim's fence token.

        A redelivery carries the same token and collapses; two claims completing one run are two
        facts (the audit's duplicated effect) even if a faulty producer gave them one id.
        """
        if isinstance(self.message, RunEvent):
            return f"{self.envelope.id}#fence={self.message.fence_token}"
        return self.envelope.id

    @property
    def produced_at(self) -> datetime | None:
        ms = self.record.timestamp_ms
        return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None else None


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


@dataclass
class _RunBatch:
    """Run facts gathered over a batch, written with one pipelined statement per kind."""

    skeletons: list[tuple[Any, ...]] = field(default_factory=list)
    dues: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    #: Workflows with new typed history events: folded again once the batch is written.
    workflows: set[str] = field(default_factory=set)


async def project(conn: Conn, *, schema: str, facts: Sequence[Fact]) -> int:
    """Apply every fact not projected before; returns how many were new."""
    fresh = await _unseen(conn, schema, facts)
    runs = _RunBatch()
    for fact in fresh:
        await _apply(conn, schema, fact, runs)
    await _flush_runs(conn, schema, runs)
    await forget_purged(conn, schema, sorted(runs.touched))
    await refold(conn, schema, runs.workflows)
    return len(fresh)


# The dedupe: (topic, event id) is the primary key of `seen`, so a fact redelivered or read
# again by a rebuild is projected once; only the ids this statement inserted are applied.
_RECORD_SEEN = (
    "INSERT INTO {schema}.seen (topic, event_id) SELECT * FROM unnest($1::text[], $2::text[]) "
    "ON CONFLICT DO NOTHING RETURNING topic, event_id"
)


async def _unseen(conn: Conn, schema: str, facts: Sequence[Fact]) -> list[Fact]:
    unique: dict[tuple[str, str], Fact] = {}
    for fact in facts:
        unique.setdefault((fact.topic, fact.dedupe_id), fact)
    if not unique:
        return []
    topics, ids = zip(*unique, strict=True)
    rows = await conn.fetch(
        sql(_RECORD_SEEN, schema),
        list(topics),
        list(ids),
    )
    inserted = {(r["topic"], r["event_id"]) for r in rows}
    return [fact for key, fact in unique.items() if key in inserted]


async def _apply(conn: Conn, schema: str, fact: Fact, runs: _RunBatch) -> None:
    message = fact.message
    projection = _projection(type(message))
    if projection is not None:
        await projection(conn, schema, fact, message, runs)
    if fact.topic == WORKFLOW_HISTORY.name:
        if isinstance(message, HistoryEvent):
            await record_event(conn, schema, fact.envelope, message)
            runs.workflows.add(message.workflow_id)
            await _history(conn, schema, message.workflow_id, fact, "history", message.sequence)
        else:
            # Registered but not a history type (an older producer's copy): listed, not folded.
            await _history(conn, schema, fact.envelope.key, fact, "history", _sequence(fact.envelope))
    if fact.topic.endswith(".commands.v1"):
        await _command_seen(conn, schema, fact)


#: What projects one message: (conn, schema, fact, the fact's message, the batch's run facts).
Projection = Callable[[Conn, str, Fact, Any, "_RunBatch"], Awaitable[None]]


@functools.cache
def _projection(kind: type[Message]) -> Projection | None:
    # The table names concrete types; a subclass (a later version's model) projects as its base.
    for cls in kind.__mro__:
        if cls in PROJECTIONS:
            return PROJECTIONS[cls]
    return None


async def _project_job_due(conn: Conn, schema: str, fact: Fact, message: JobDue, runs: _RunBatch) -> None:
    _job_due(fact, message, runs)
    if message.workflow_id is not None:
        await _history(conn, schema, message.workflow_id, fact, "activity", message.sequence)


async def _project_run_event(conn: Conn, schema: str, fact: Fact, message: RunEvent, runs: _RunBatch) -> None:
    _run_event(message, runs)
    if message.workflow_id is not None:
        await _history(conn, schema, message.workflow_id, fact, "activity", message.sequence)


# One row per (schedule, slot) (primary key): a SlotSkipped seen again adds nothing.
_INSERT_SKIPPED_SLOT = (
    "INSERT INTO {schema}.skipped_slots (schedule_id, slot, run_id, reason, detail, at) "
    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
)


async def _project_slot_skipped(
    conn: Conn, schema: str, fact: Fact, message: SlotSkipped, runs: _RunBatch
) -> None:
    await conn.execute(
        sql(_INSERT_SKIPPED_SLOT, schema),
        message.schedule_id,
        message.slot,
        message.run_id,
        message.reason,
        message.detail,
        fact.envelope.occurred_at,
    )


# One row per (event, slot) (primary key): a SlotsRerun or SlotsMarked seen again adds nothing.
_INSERT_SLOT_REPAIRS = """
INSERT INTO {schema}.slot_repairs (schedule_id, slot, event_id, at, action, run_id, number, principal, reason)
SELECT $1, r.slot, $2, $3, r.action, r.run_id, r.number, $4, $5
  FROM unnest($6::timestamptz[], $7::text[], $8::text[], $9::int[]) AS r(slot, action, run_id, number)
ON CONFLICT DO NOTHING
"""


async def _slot_repairs(conn: Conn, schema: str, fact: Fact, message: SlotsRerun | SlotsMarked) -> None:
    if isinstance(message, SlotsRerun):
        slots = [r.slot for r in message.reruns]
        actions = ["forced_rerun" if r.forced else "rerun" for r in message.reruns]
        run_ids: list[str | None] = [r.run_id for r in message.reruns]
        numbers: list[int | None] = [r.number for r in message.reruns]
    else:
        slots = list(message.slots)
        actions = [f"marked_{message.mark}"] * len(slots)
        run_ids = [None] * len(slots)
        numbers = [None] * len(slots)
    await conn.execute(
        sql(_INSERT_SLOT_REPAIRS, schema),
        message.schedule_id,
        fact.envelope.id,
        fact.envelope.occurred_at,
        message.principal,
        message.reason,
        slots,
        actions,
        run_ids,
        numbers,
    )


async def _project_dead_letter(
    conn: Conn, schema: str, fact: Fact, message: DeadLetterStatusChanged, runs: _RunBatch
) -> None:
    await _dead_letter(conn, schema, message)
    if message.command_id is not None:
        await _acknowledged_by_dlq(conn, schema, fact, message.command_id)


def _without_runs(project: Callable[[Conn, str, Fact, Any], Awaitable[None]]) -> Projection:
    def call(conn: Conn, schema: str, fact: Fact, message: Any, runs: _RunBatch) -> Awaitable[None]:
        return project(conn, schema, fact, message)

    return call


def _sequence(envelope: Envelope) -> int | None:
    value = envelope.data.get("sequence")
    return value if isinstance(value, int) else None


# -- runs ---------------------------------------------------------------------------------------


def _job_due(fact: Fact, due: JobDue, runs: _RunBatch) -> None:
    runs.skeletons.append(
        (
            due.run_id,
            due.job_id,
            due.slot,
            due.workflow_id,
            due.sequence,
            due.kind,
            due.handler,
            list(due.tags),
            _json(scrub_nul(due.payload)),
        )
    )
    runs.dues.append(
        (due.run_id, due.attempt, due.kind, fact.envelope.occurred_at, fact.produced_at, due.fire_at)
    )
    runs.touched.add(due.run_id)


def _run_event(event: RunEvent, runs: _RunBatch) -> None:
    started = finished = retry_at = None
    error: dict[str, Any] | None = None
    result: str | None = None
    traceback: str | None = None
    logs: str | None = None
    completed = False
    if isinstance(event, RunStarted):
        outcome, started = "running", event.started_at
    elif isinstance(event, RunCompleted):
        outcome, started, finished, completed = "completed", event.started_at, event.finished_at, True
        result = _json(event.result)
        logs = _json(scrub_nul(event.logs)) if event.logs else None
    elif isinstance(event, RunFailed):
        outcome, finished = "failed", event.finished_at
        error = {"type": event.error_type, "message": event.message, "retryable": event.retryable}
        traceback = scrub_nul(event.traceback) or None
        logs = _json(scrub_nul(event.logs)) if event.logs else None
    elif isinstance(event, RunRetrying) and event.held_reason is not None:
        outcome, retry_at, error = "held", event.retry_at, {"held_reason": event.held_reason}
    elif isinstance(event, RunRetrying):
        outcome, retry_at = "retrying", event.retry_at
    elif isinstance(event, RunDeadLettered):
        outcome, error = "dead_lettered", {"dead_letter_reason": event.reason}
    elif isinstance(event, RunSkipped):
        outcome, error = "skipped", {"skip_reason": event.reason}
    else:
        return
    runs.skeletons.append(
        (event.run_id, event.job_id, event.slot, event.workflow_id, event.sequence, None, None, [], None)
    )
    runs.attempts.append(
        (
            event.run_id,
            event.attempt,
            event.fence_token,
            event.owner,
            outcome,
            RANKS[outcome],
            completed,
            started,
            finished,
            retry_at,
            _json(error) if error is not None else None,
            result,
            traceback,
            logs,
        )
    )
    runs.touched.add(event.run_id)


# The skeleton exists so the derived update below has a row to land on; the JobDue fills in
# what only it knows (kind, handler, tags), whichever arrives first: every field keeps its first
# known value, so the order the facts arrive in changes nothing.
_UPSERT_RUN_SKELETON = """
INSERT INTO {schema}.runs (run_id, job_id, slot, workflow_id, sequence, kind, handler, tags,
    payload, state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, 'due')
ON CONFLICT (run_id) DO UPDATE SET
    kind = COALESCE(runs.kind, EXCLUDED.kind),
    payload = COALESCE(runs.payload, EXCLUDED.payload),
    handler = COALESCE(runs.handler, EXCLUDED.handler),
    tags = CASE WHEN cardinality(runs.tags) = 0 THEN EXCLUDED.tags ELSE runs.tags END,
    workflow_id = COALESCE(runs.workflow_id, EXCLUDED.workflow_id),
    sequence = COALESCE(runs.sequence, EXCLUDED.sequence)
"""


# One row per (run, attempt) (primary key): each attempt's JobDue, kept once.
_INSERT_RUN_DUE = (
    "INSERT INTO {schema}.run_dues (run_id, attempt, kind, due_at, produced_at, fire_at) "
    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
)


# One row per claim (run, fence token, attempt); its facts merge monotonically (highest rank,
# earliest start, latest finish, first result), so any arrival order gives the same row.
_MERGE_RUN_ATTEMPT = """
INSERT INTO {schema}.run_attempts AS a (run_id, attempt, fence_token, owner, outcome, rank,
    completed, started_at, finished_at, retry_at, error, result, traceback, logs)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12::jsonb, $13, $14::jsonb)
ON CONFLICT (run_id, fence_token, attempt) DO UPDATE SET
    outcome = CASE WHEN EXCLUDED.rank > a.rank THEN EXCLUDED.outcome ELSE a.outcome END,
    rank = GREATEST(a.rank, EXCLUDED.rank),
    completed = a.completed OR EXCLUDED.completed,
    started_at = LEAST(a.started_at, EXCLUDED.started_at),
    finished_at = GREATEST(a.finished_at, EXCLUDED.finished_at),
    retry_at = GREATEST(a.retry_at, EXCLUDED.retry_at),
    -- failure and dead-letter facts carry disjoint keys: the merge commutes
    error = CASE WHEN a.error IS NULL THEN EXCLUDED.error
                 WHEN EXCLUDED.error IS NULL THEN a.error
                 ELSE a.error || EXCLUDED.error END,
    result = COALESCE(a.result, EXCLUDED.result),
    -- one claim ends in one RunFailed or RunCompleted: the first that carries them
    traceback = COALESCE(a.traceback, EXCLUDED.traceback),
    logs = COALESCE(a.logs, EXCLUDED.logs)
"""


async def _flush_runs(conn: Conn, schema: str, runs: _RunBatch) -> None:
    if not runs.touched:
        return
    await conn.executemany(
        sql(_UPSERT_RUN_SKELETON, schema),
        _merged_skeletons(runs.skeletons),
    )
    if runs.dues:
        await conn.executemany(
            sql(_INSERT_RUN_DUE, schema),
            runs.dues,
        )
    if runs.attempts:
        await conn.executemany(
            sql(_MERGE_RUN_ATTEMPT, schema),
            runs.attempts,
        )
        await conn.execute(sql(_TAKEN_OVER, schema), sorted(runs.touched))
    await conn.execute(sql(_DERIVE_RUNS, schema), sorted(runs.touched))


def _merged_skeletons(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """One skeleton per run (a batch carries several facts per run), first known value per field."""
    merged: dict[str, list[Any]] = {}
    for row in rows:
        found = merged.get(row[0])
        if found is None:
            merged[row[0]] = list(row)
            continue
        for i, value in enumerate(row):
            if found[i] is None or found[i] == []:
                found[i] = value
    return [tuple(values) for values in merged.values()]


# A claim whose lease lapsed was taken over under a higher fence token: its owner's late writes
# bounce, so it never reports an outcome and would show `running` forever. Any higher token on the
# run settles it as `taken_over` (rank stays 1: a fact it did report before the takeover still
# outranks it, whatever order the facts arrive in).
_TAKEN_OVER = """
UPDATE {schema}.run_attempts AS a SET outcome = 'taken_over'
 WHERE a.run_id = ANY($1::text[]) AND a.outcome = 'running'
   AND EXISTS (SELECT 1 FROM {schema}.run_attempts b WHERE b.run_id = a.run_id AND b.fence_token > a.fence_token)
"""

# A run's state is a function of all its facts, never of their arrival order: completed anywhere
# wins; otherwise the latest claim (highest fence token, then attempt) speaks, unless a JobDue for
# a later attempt has arrived and nobody has claimed it yet.
_DERIVE_RUNS = """
WITH latest AS (
    SELECT DISTINCT ON (run_id) run_id, attempt, fence_token, owner, outcome
      FROM {schema}.run_attempts WHERE run_id = ANY($1::text[])
     ORDER BY run_id, fence_token DESC, attempt DESC
), facts AS (
    SELECT run_id,
           min(started_at) AS started_at,
           max(finished_at) AS finished_at,
           count(*) FILTER (WHERE completed) AS completions,
           (array_agg(result ORDER BY fence_token, attempt) FILTER (WHERE completed))[1] AS result,
           (array_agg(error ORDER BY fence_token DESC, attempt DESC) FILTER (WHERE error IS NOT NULL))[1] AS error
      FROM {schema}.run_attempts WHERE run_id = ANY($1::text[]) GROUP BY run_id
), dues AS (
    SELECT run_id, max(attempt) AS due_attempt,
           (array_agg(due_at ORDER BY attempt))[1] AS due_at,
           (array_agg(produced_at ORDER BY attempt))[1] AS produced_at,
           (array_agg(fire_at ORDER BY attempt))[1] AS fire_at
      FROM {schema}.run_dues WHERE run_id = ANY($1::text[]) GROUP BY run_id
)
UPDATE {schema}.runs AS r SET
    state = CASE
        WHEN facts.completions > 0 THEN 'completed'
        WHEN latest.run_id IS NULL THEN 'due'
        WHEN dues.due_attempt > latest.attempt THEN 'due'
        ELSE latest.outcome END,
    attempt = GREATEST(COALESCE(latest.attempt, 0), COALESCE(dues.due_attempt, 0)),
    fence_token = latest.fence_token,
    owner = latest.owner,
    due_at = dues.due_at,
    produced_at = dues.produced_at,
    fire_at = dues.fire_at,
    started_at = facts.started_at,
    finished_at = facts.finished_at,
    result = facts.result,
    -- A completed run's outcome is its result: the errors of the attempts before it stay on
    -- those attempts (run_attempts), not on the run.
    error = CASE WHEN facts.completions > 0 THEN NULL ELSE facts.error END,
    completions = COALESCE(facts.completions, 0)
FROM (SELECT unnest($1::text[]) AS run_id) AS t
LEFT JOIN latest ON latest.run_id = t.run_id
LEFT JOIN facts ON facts.run_id = t.run_id
LEFT JOIN dues ON dues.run_id = t.run_id
WHERE r.run_id = t.run_id
"""


# -- schedules ----------------------------------------------------------------------------------


# A schedule's events arrive in record order (one partition per schedule id), so each applies as
# it comes; a create takes over whatever a deleted schedule of the same id left.
_UPSERT_CREATED_SCHEDULE = """
INSERT INTO {schema}.schedules (schedule_id, definition, handler, tags, paused, next_fire_at,
    deleted, created_at, updated_at)
VALUES ($1, $2::jsonb, $3, $4, $5, $6, false, $7, $7)
ON CONFLICT (schedule_id) DO UPDATE SET definition = EXCLUDED.definition,
    handler = EXCLUDED.handler, tags = EXCLUDED.tags, paused = EXCLUDED.paused,
    pause_reason = NULL, resume_at = NULL, next_fire_at = EXCLUDED.next_fire_at,
    deleted = false, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
"""


_UPDATE_SCHEDULE_DEFINITION = (
    "UPDATE {schema}.schedules SET definition = $2::jsonb, handler = $3, tags = $4, "
    "next_fire_at = $5, updated_at = $6 WHERE schedule_id = $1"
)


async def _schedule_defined(
    conn: Conn, schema: str, fact: Fact, message: ScheduleCreated | ScheduleUpdated
) -> None:
    definition = message.definition.model_dump(mode="json")
    at = fact.envelope.occurred_at
    if isinstance(message, ScheduleCreated):
        await conn.execute(
            sql(_UPSERT_CREATED_SCHEDULE, schema),
            message.schedule_id,
            _json(definition),
            message.definition.handler,
            list(message.definition.tags),
            message.paused,
            message.next_fire_at,
            at,
        )
        change = "created"
        if message.paused:
            await _timeline(conn, schema, fact, message.schedule_id, "created", definition)
            change = "paused"
    else:
        await conn.execute(
            sql(_UPDATE_SCHEDULE_DEFINITION, schema),
            message.schedule_id,
            _json(definition),
            message.definition.handler,
            list(message.definition.tags),
            message.next_fire_at,
            at,
        )
        change = "updated"
    await _timeline(conn, schema, fact, message.schedule_id, change, definition)


# Pause, resume and delete apply in record order too (one partition per schedule id).
_PAUSE_SCHEDULE = (
    "UPDATE {schema}.schedules SET paused = true, pause_reason = $2, resume_at = $3, "
    "updated_at = $4 WHERE schedule_id = $1"
)


_RESUME_SCHEDULE = (
    "UPDATE {schema}.schedules SET paused = false, pause_reason = NULL, resume_at = NULL, "
    "next_fire_at = $2, updated_at = $3 WHERE schedule_id = $1"
)


_DELETE_SCHEDULE = (
    "UPDATE {schema}.schedules SET deleted = true, next_fire_at = NULL, updated_at = $2 "
    "WHERE schedule_id = $1"
)


async def _schedule_changed(
    conn: Conn, schema: str, fact: Fact, message: SchedulePaused | ScheduleResumed | ScheduleDeleted
) -> None:
    at = fact.envelope.occurred_at
    if isinstance(message, SchedulePaused):
        change = "paused"
        await conn.execute(
            sql(_PAUSE_SCHEDULE, schema),
            message.schedule_id,
            message.reason,
            message.resume_at,
            at,
        )
    elif isinstance(message, ScheduleResumed):
        change = "resumed"
        await conn.execute(
            sql(_RESUME_SCHEDULE, schema),
            message.schedule_id,
            message.next_fire_at,
            at,
        )
    else:
        change = "deleted"
        await conn.execute(
            sql(_DELETE_SCHEDULE, schema),
            message.schedule_id,
            at,
        )
    await _timeline(conn, schema, fact, message.schedule_id, change, None)


# One row per (schedule, event id) (primary key): an event read again adds nothing; `position`
# (the record offset) orders the changes of one instant.
_INSERT_TIMELINE = (
    "INSERT INTO {schema}.schedule_timeline (schedule_id, event_id, position, at, change, definition) "
    "VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT DO NOTHING"
)


async def _timeline(
    conn: Conn, schema: str, fact: Fact, schedule_id: str, change: str, definition: dict[str, Any] | None
) -> None:
    # A paused create records two changes from one event; the suffix keeps both rows unique.
    event_id = fact.envelope.id if change != "paused" or definition is None else f"{fact.envelope.id}#paused"
    await conn.execute(
        sql(_INSERT_TIMELINE, schema),
        schedule_id,
        event_id,
        fact.record.offset,
        fact.envelope.occurred_at,
        change,
        _json(definition) if definition is not None else None,
    )


# -- claimers ----------------------------------------------------------------------------------


# The newest announcement wins whatever order a rebuild reads them in (one partition: in order).
_UPSERT_CLAIMER = """
INSERT INTO {schema}.claimers AS c (claimer_id, handlers, interval_ms, started_at, announced_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (claimer_id) DO UPDATE SET handlers = EXCLUDED.handlers,
    interval_ms = EXCLUDED.interval_ms, started_at = EXCLUDED.started_at,
    announced_at = EXCLUDED.announced_at
WHERE EXCLUDED.announced_at >= c.announced_at
"""


async def _claimer(conn: Conn, schema: str, fact: Fact, message: ClaimerAnnounced) -> None:
    await conn.execute(
        sql(_UPSERT_CLAIMER, schema),
        message.claimer_id,
        list(message.handlers),
        int(message.interval.total_seconds() * 1000),
        message.started_at,
        fact.envelope.occurred_at,
    )


# -- downstreams -------------------------------------------------------------------------------

# One row per change event: a redelivered event collapses on its id.
_INSERT_DOWNSTREAM_CHANGE = """
INSERT INTO {schema}.downstream_changes (event_id, name, from_state, to_state, cause, reason,
    manual, by_claimer, command_id, held, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (event_id) DO NOTHING
"""

# A change is newer than any report taken before it (the same clock): it sets the state; an
# older fact never overwrites a newer one, so arrival order does not matter.
_UPSERT_DOWNSTREAM_CHANGED = """
INSERT INTO {schema}.downstreams AS d (name, state, manual, settings, held, changed_at, fact_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6)
ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, manual = EXCLUDED.manual,
    settings = EXCLUDED.settings, held = EXCLUDED.held, changed_at = EXCLUDED.changed_at,
    fact_at = EXCLUDED.fact_at
WHERE EXCLUDED.fact_at >= d.fact_at
"""

# The latest report of a downstream, unless a newer fact (change or report) is already there.
_UPSERT_DOWNSTREAM_REPORTED = """
INSERT INTO {schema}.downstreams AS d (name, state, manual, settings, held, window_seconds,
    first_attempts, retries, retry_allowance, successes, failures, changed_at, reported_at, fact_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13)
ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, manual = EXCLUDED.manual,
    settings = EXCLUDED.settings, held = EXCLUDED.held, window_seconds = EXCLUDED.window_seconds,
    first_attempts = EXCLUDED.first_attempts, retries = EXCLUDED.retries,
    retry_allowance = EXCLUDED.retry_allowance, successes = EXCLUDED.successes,
    failures = EXCLUDED.failures, changed_at = EXCLUDED.changed_at,
    reported_at = EXCLUDED.reported_at, fact_at = EXCLUDED.fact_at
WHERE EXCLUDED.fact_at >= d.fact_at
"""


async def _downstream_changed(conn: Conn, schema: str, fact: Fact, message: DownstreamChanged) -> None:
    await conn.execute(
        sql(_INSERT_DOWNSTREAM_CHANGE, schema),
        fact.envelope.id,
        message.downstream,
        message.from_state,
        message.to_state,
        message.cause,
        scrub_nul(message.reason),
        message.manual,
        message.by,
        message.command_id,
        message.held,
        message.at,
    )
    await conn.execute(
        sql(_UPSERT_DOWNSTREAM_CHANGED, schema),
        message.downstream,
        message.to_state,
        message.manual,
        message.settings.model_dump_json(exclude_none=True),
        message.held,
        message.at,
    )


async def _downstream_reported(conn: Conn, schema: str, fact: Fact, message: DownstreamReported) -> None:
    await conn.execute(
        sql(_UPSERT_DOWNSTREAM_REPORTED, schema),
        message.downstream,
        message.state,
        message.manual,
        message.settings.model_dump_json(exclude_none=True),
        message.held,
        message.window_seconds,
        message.first_attempts,
        message.retries,
        message.retry_allowance,
        message.successes,
        message.failures,
        message.changed_at,
        message.at,
    )


# -- commands -----------------------------------------------------------------------------------


# A command and its acknowledgement come from different topics, in either order: the command
# fills blanks, and an acknowledgement projected first stays final.
_UPSERT_COMMAND_SEEN = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, source, published_at,
                               range_start, range_end, principal)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (command_id) DO UPDATE SET
    principal = EXCLUDED.principal,
    command_type = COALESCE(commands.command_type, EXCLUDED.command_type),
    subject = COALESCE(commands.subject, EXCLUDED.subject),
    range_start = COALESCE(commands.range_start, EXCLUDED.range_start),
    range_end = COALESCE(commands.range_end, EXCLUDED.range_end),
    source = EXCLUDED.source, published_at = EXCLUDED.published_at,
    -- an acknowledgement projected first is final: the command itself only fills blanks
    status = CASE WHEN commands.status IN ('accepted', 'rejected') THEN commands.status
                  ELSE EXCLUDED.status END
"""


async def _command_seen(conn: Conn, schema: str, fact: Fact) -> None:
    status = "pending" if fact.envelope.type in ACKNOWLEDGED_COMMANDS else "published"
    # A backfill's range: what the api's cap on backfills in flight per schedule counts by.
    backfill = fact.message if isinstance(fact.message, Backfill) else None
    await conn.execute(
        sql(_UPSERT_COMMAND_SEEN, schema),
        fact.envelope.id,
        fact.envelope.type,
        fact.envelope.key,
        status,
        fact.envelope.source,
        fact.envelope.occurred_at,
        backfill.start if backfill is not None else None,
        backfill.end if backfill is not None else None,
        fact.envelope.principal,
    )


# The acknowledgement sets the status and the reason; type and subject only fill blanks.
_UPSERT_ACKNOWLEDGED = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, reason, acknowledged_at, summary)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (command_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason,
    acknowledged_at = EXCLUDED.acknowledged_at,
    command_type = COALESCE(commands.command_type, EXCLUDED.command_type),
    subject = COALESCE(commands.subject, EXCLUDED.subject),
    summary = COALESCE(EXCLUDED.summary, commands.summary)
"""
#: Commands whose acceptance says what they did (the dlq's: "redrove 3 dead letter(s); ..."),
#: kept as the command's `summary`.
DETAILED = frozenset(m.message_type for m in DLQ_COMMAND_TYPES)


async def _acknowledged(
    conn: Conn, schema: str, fact: Fact, message: CommandAccepted | CommandRejected
) -> None:
    accepted = isinstance(message, CommandAccepted)
    await conn.execute(
        sql(_UPSERT_ACKNOWLEDGED, schema),
        message.command_id,
        message.command_type,
        message.subject,
        "accepted" if accepted else "rejected",
        None if accepted else getattr(message, "reason", None),
        fact.envelope.occurred_at,
        message.subject if accepted and message.command_type in DETAILED else None,
    )
    if isinstance(message, CommandRejected) and message.command_type == StartWorkflow.message_type:
        await conn.execute(
            sql(_WORKFLOW_START_REJECTED, schema),
            message.subject,
            message.reason,
            fact.envelope.occurred_at,
        )


# The dlq service names the command that redrove or discarded an entry: that is its acceptance
# (the earliest acknowledgement time stays).
_UPSERT_ACCEPTED_BY_DLQ = """
INSERT INTO {schema}.commands (command_id, status, acknowledged_at) VALUES ($1, 'accepted', $2)
ON CONFLICT (command_id) DO UPDATE SET status = 'accepted',
    acknowledged_at = LEAST(commands.acknowledged_at, EXCLUDED.acknowledged_at)
"""


async def _acknowledged_by_dlq(conn: Conn, schema: str, fact: Fact, command_id: str) -> None:
    await conn.execute(
        sql(_UPSERT_ACCEPTED_BY_DLQ, schema),
        command_id,
        fact.envelope.occurred_at,
    )


# -- dead letters -------------------------------------------------------------------------------


# Ordered per dead letter id (its partition): the newest status event is the truth; a field it
# leaves empty keeps what an earlier one said.
_UPSERT_DEAD_LETTER = """
INSERT INTO {schema}.dead_letters (dead_letter_id, status, reason, topic, source_service, partition,
    "offset", key, job_id, run_id, original_type, error_type, error, tags, count, redrive_count,
    first_seen, last_seen, status_at, note, command_id, redrive_of, workflow_id, sequence, redrive_target)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20, $21, $22, $23, $24, $25)
ON CONFLICT (dead_letter_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason,
    topic = EXCLUDED.topic, source_service = EXCLUDED.source_service,
    partition = COALESCE(EXCLUDED.partition, dead_letters.partition),
    "offset" = COALESCE(EXCLUDED."offset", dead_letters."offset"),
    key = COALESCE(EXCLUDED.key, dead_letters.key),
    job_id = COALESCE(EXCLUDED.job_id, dead_letters.job_id),
    run_id = COALESCE(EXCLUDED.run_id, dead_letters.run_id),
    original_type = COALESCE(EXCLUDED.original_type, dead_letters.original_type),
    error_type = CASE WHEN EXCLUDED.error_type = '' THEN dead_letters.error_type ELSE EXCLUDED.error_type END,
    error = CASE WHEN EXCLUDED.error = '' THEN dead_letters.error ELSE EXCLUDED.error END,
    tags = CASE WHEN cardinality(EXCLUDED.tags) = 0 THEN dead_letters.tags ELSE EXCLUDED.tags END,
    count = EXCLUDED.count, redrive_count = EXCLUDED.redrive_count,
    first_seen = COALESCE(dead_letters.first_seen, EXCLUDED.first_seen),
    last_seen = COALESCE(EXCLUDED.last_seen, dead_letters.last_seen),
    status_at = EXCLUDED.status_at, note = EXCLUDED.note,
    command_id = COALESCE(EXCLUDED.command_id, dead_letters.command_id),
    redrive_of = COALESCE(EXCLUDED.redrive_of, dead_letters.redrive_of),
    workflow_id = COALESCE(EXCLUDED.workflow_id, dead_letters.workflow_id),
    sequence = COALESCE(EXCLUDED.sequence, dead_letters.sequence),
    redrive_target = COALESCE(EXCLUDED.redrive_target, dead_letters.redrive_target)
"""


async def _dead_letter(conn: Conn, schema: str, m: DeadLetterStatusChanged) -> None:
    await conn.execute(
        sql(_UPSERT_DEAD_LETTER, schema),
        m.dead_letter_id,
        m.status,
        m.reason,
        m.topic,
        m.source_service,
        m.partition,
        m.offset,
        m.key,
        m.job_id,
        m.run_id,
        m.original_type,
        m.error_type,
        m.error,
        list(m.tags),
        m.count,
        m.redrive_count,
        m.first_seen,
        m.last_seen,
        m.at,
        m.note,
        m.command_id,
        m.redrive_of,
        m.workflow_id,
        m.sequence,
        m.redrive_target,
    )


# -- timers and workflows -----------------------------------------------------------------------


# A timer's facts (StartTimer, CancelTimer, TimerFired) come from two topics in any order: the
# status of the highest rank wins (TIMER_RANKS) and every other field keeps its first known value.
_MERGE_TIMER = """
INSERT INTO {schema}.timers AS t (timer_id, owner, action, sequence, fire_at, status, rank, fired_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (timer_id) DO UPDATE SET
    owner = CASE WHEN t.owner = '' THEN EXCLUDED.owner ELSE t.owner END,
    action = CASE WHEN t.action = 'unknown' THEN EXCLUDED.action ELSE t.action END,
    sequence = COALESCE(t.sequence, EXCLUDED.sequence),
    fire_at = COALESCE(t.fire_at, EXCLUDED.fire_at),
    status = CASE WHEN EXCLUDED.rank > t.rank THEN EXCLUDED.status ELSE t.status END,
    rank = GREATEST(t.rank, EXCLUDED.rank),
    fired_at = COALESCE(t.fired_at, EXCLUDED.fired_at)
"""


async def _timer(conn: Conn, schema: str, fact: Fact, message: StartTimer | CancelTimer | TimerFired) -> None:
    if isinstance(message, StartTimer | CancelTimer) and fact.topic != TIMER_COMMANDS.name:
        # The ticker refuses timer commands on the public topic (bar a rolling upgrade's setting
        # the api cannot see): one there is listed among the commands with the ticker's answer,
        # never as a timer of the workflow it names.
        return
    owner, action, sequence = "", "unknown", None
    fire_at: datetime | None = None
    fired_at: datetime | None = None
    if isinstance(message, StartTimer):
        on_fire = message.on_fire
        action, fire_at = on_fire.action, message.fire_at
        if isinstance(on_fire, FireTimerFired):
            owner, sequence = on_fire.owner, on_fire.sequence
        else:
            owner, sequence = on_fire.job.job_id, on_fire.job.sequence
        status = "pending"
    elif isinstance(message, CancelTimer):
        status = "cancelled"
    else:
        owner, action, sequence, status = message.owner, "timer_fired", message.sequence, "fired"
        fire_at, fired_at = message.fire_at, message.fired_at
    await conn.execute(
        sql(_MERGE_TIMER, schema),
        message.timer_id,
        owner,
        action,
        sequence,
        fire_at,
        status,
        TIMER_RANKS[status],
        fired_at,
    )
    if action == "timer_fired" and owner:
        await _history(conn, schema, owner, fact, "timer", sequence)


# A workflow command only fills blanks and widens the times (earliest request, latest update):
# the history, folded into the same row (workflow_projection), speaks for the rest. A cancel
# request sticks, with its first reason.
_UPSERT_WORKFLOW_REQUESTED = """
INSERT INTO {schema}.workflows (workflow_id, workflow_type, input, status, requested_at, updated_at)
VALUES ($1, $2, $3::jsonb, 'requested', $4, $4)
ON CONFLICT (workflow_id) DO UPDATE SET
    workflow_type = COALESCE(workflows.workflow_type, EXCLUDED.workflow_type),
    input = COALESCE(workflows.input, EXCLUDED.input),
    requested_at = LEAST(workflows.requested_at, EXCLUDED.requested_at),
    updated_at = GREATEST(workflows.updated_at, EXCLUDED.updated_at)
"""


# A cancel marks a workflow the api knows; it never makes a row: commands of one workflow share a
# partition, so its StartWorkflow (or its history's fold) is projected first, and a cancel of an
# id that never started is the orchestrator's to reject (its command row says why).
_MARK_WORKFLOW_CANCEL = """
UPDATE {schema}.workflows SET cancel_requested = true,
    cancel_reason = COALESCE(cancel_reason, $2),
    updated_at = GREATEST(updated_at, $3)
 WHERE workflow_id = $1
"""


# A refused StartWorkflow: the row it made says `rejected` with the reason while no history exists
# (the orchestrator's answer and the command come from two topics, in either order: this fills a
# row the command has not made yet, and the command never overwrites a status). History, folded
# into the row, speaks for the workflow once there (a duplicate start's refusal of a running
# workflow changes nothing; `workflow_projection` clears the rejection).
_WORKFLOW_START_REJECTED = """
INSERT INTO {schema}.workflows (workflow_id, status, rejection, updated_at)
VALUES ($1, 'rejected', $2, $3)
ON CONFLICT (workflow_id) DO UPDATE SET
    status = CASE WHEN workflows.last_sequence IS NULL THEN 'rejected' ELSE workflows.status END,
    rejection = CASE WHEN workflows.last_sequence IS NULL THEN EXCLUDED.rejection ELSE NULL END,
    updated_at = GREATEST(workflows.updated_at, EXCLUDED.updated_at)
"""


async def _workflow_command(
    conn: Conn,
    schema: str,
    fact: Fact,
    message: StartWorkflow | SignalWorkflow | CancelWorkflow | TerminateWorkflow,
) -> None:
    at = fact.envelope.occurred_at
    if isinstance(message, StartWorkflow):
        await conn.execute(
            sql(_UPSERT_WORKFLOW_REQUESTED, schema),
            message.workflow_id,
            message.workflow_type,
            _json(message.input),
            at,
        )
    elif isinstance(message, CancelWorkflow):
        await conn.execute(
            sql(_MARK_WORKFLOW_CANCEL, schema),
            message.workflow_id,
            message.reason,
            at,
        )
    await _history(conn, schema, message.workflow_id, fact, "command", None)


# One row per (workflow, entry id) (primary key): the entry id names the topic and the fact's
# dedupe id, so a fact is listed once however often it arrives.
_INSERT_HISTORY_ENTRY = (
    "INSERT INTO {schema}.workflow_history (workflow_id, entry_id, at, origin, type, sequence, data, "
    "version) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8) ON CONFLICT DO NOTHING"
)


async def _history(
    conn: Conn, schema: str, workflow_id: str, fact: Fact, origin: str, sequence: int | None
) -> None:
    await conn.execute(
        sql(_INSERT_HISTORY_ENTRY, schema),
        workflow_id,
        f"{fact.topic}/{fact.dedupe_id}",
        fact.envelope.occurred_at,
        origin,
        fact.envelope.type,
        sequence,
        _json(fact.envelope.data),
        fact.envelope.version,
    )


#: Every message type the read model projects, and what projects it (other types are only
#: recorded as seen, and listed in a workflow's history or the commands when on those topics).
PROJECTIONS: dict[type[Message], Projection] = {
    JobDue: _project_job_due,
    **dict.fromkeys(RUN_EVENT_TYPES, _project_run_event),
    **dict.fromkeys((ScheduleCreated, ScheduleUpdated), _without_runs(_schedule_defined)),
    **dict.fromkeys((SchedulePaused, ScheduleResumed, ScheduleDeleted), _without_runs(_schedule_changed)),
    SlotSkipped: _project_slot_skipped,
    **dict.fromkeys((SlotsRerun, SlotsMarked), _without_runs(_slot_repairs)),
    ClaimerAnnounced: _without_runs(_claimer),
    DownstreamChanged: _without_runs(_downstream_changed),
    DownstreamReported: _without_runs(_downstream_reported),
    **dict.fromkeys((CommandAccepted, CommandRejected), _without_runs(_acknowledged)),
    DeadLetterStatusChanged: _project_dead_letter,
    **dict.fromkeys((StartTimer, CancelTimer, TimerFired), _without_runs(_timer)),
    **dict.fromkeys(
        (StartWorkflow, SignalWorkflow, CancelWorkflow, TerminateWorkflow), _without_runs(_workflow_command)
    ),
}
