"""Turn a batch of decoded events into read-model rows, inside the caller's transaction.

Two rules make the read model rebuildable with the same result whatever the interleaving of
partitions and batches:

- Events of one key arrive in order (one partition), so per-key state (a schedule, a dead letter)
  is applied in record order.
- Facts about one run or timer come from several topics (JobDue on the jobs topic, run events on
  the runs topic, retries via the commands topic), so those projections are commutative: each
  fact is its own row or merges with a monotone rule (highest rank, earliest start, latest
  finish), and a run's state is derived from all of its facts after every batch.

The statements, each with the invariant it keeps, are in `slotflow_api.sql.projection`.
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
from slotflow.contracts.search import dump_search_attributes
from slotflow.contracts.topics import TIMER_COMMANDS, WORKFLOW_HISTORY
from slotflow.core.nul import scrub_nul
from slotflow.kafka.records import Record
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql
from slotflow_api.retention import forget_purged
from slotflow_api.sql.projection import (
    DERIVE_RUNS,
    INSERT_DOWNSTREAM_CHANGE,
    INSERT_HISTORY_ENTRY,
    INSERT_RUN_DUE,
    INSERT_SKIPPED_SLOT,
    INSERT_SLOT_REPAIRS,
    INSERT_TIMELINE_CHANGE,
    MARK_SCHEDULE_DELETED,
    MARK_TAKEN_OVER,
    MARK_WORKFLOW_CANCEL,
    MERGE_RUN_ATTEMPT,
    MERGE_TIMER,
    PAUSE_SCHEDULE,
    RECORD_SEEN,
    RESUME_SCHEDULE,
    UPDATE_SCHEDULE_DEFINITION,
    UPSERT_ACCEPTED_BY_DLQ,
    UPSERT_ACKNOWLEDGED,
    UPSERT_CLAIMER,
    UPSERT_COMMAND_SEEN,
    UPSERT_CREATED_SCHEDULE,
    UPSERT_DEAD_LETTER,
    UPSERT_DOWNSTREAM_CHANGED,
    UPSERT_DOWNSTREAM_REPORTED,
    UPSERT_RUN_SKELETON,
    UPSERT_WORKFLOW_REQUESTED,
    UPSERT_WORKFLOW_START_REJECTED,
)
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


async def _unseen(conn: Conn, schema: str, facts: Sequence[Fact]) -> list[Fact]:
    unique: dict[tuple[str, str], Fact] = {}
    for fact in facts:
        unique.setdefault((fact.topic, fact.dedupe_id), fact)
    if not unique:
        return []
    topics, ids = zip(*unique, strict=True)
    rows = await conn.fetch(
        sql(RECORD_SEEN, schema),
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


async def _project_slot_skipped(
    conn: Conn, schema: str, fact: Fact, message: SlotSkipped, runs: _RunBatch
) -> None:
    await conn.execute(
        sql(INSERT_SKIPPED_SLOT, schema),
        message.schedule_id,
        message.slot,
        message.run_id,
        message.reason,
        message.detail,
        fact.envelope.occurred_at,
    )


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
        sql(INSERT_SLOT_REPAIRS, schema),
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


async def _flush_runs(conn: Conn, schema: str, runs: _RunBatch) -> None:
    if not runs.touched:
        return
    await conn.executemany(
        sql(UPSERT_RUN_SKELETON, schema),
        _merged_skeletons(runs.skeletons),
    )
    if runs.dues:
        await conn.executemany(
            sql(INSERT_RUN_DUE, schema),
            runs.dues,
        )
    if runs.attempts:
        await conn.executemany(
            sql(MERGE_RUN_ATTEMPT, schema),
            runs.attempts,
        )
        await conn.execute(sql(MARK_TAKEN_OVER, schema), sorted(runs.touched))
    await conn.execute(sql(DERIVE_RUNS, schema), sorted(runs.touched))


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


# -- schedules ----------------------------------------------------------------------------------


async def _schedule_defined(
    conn: Conn, schema: str, fact: Fact, message: ScheduleCreated | ScheduleUpdated
) -> None:
    definition = message.definition.model_dump(mode="json")
    at = fact.envelope.occurred_at
    if isinstance(message, ScheduleCreated):
        await conn.execute(
            sql(UPSERT_CREATED_SCHEDULE, schema),
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
            sql(UPDATE_SCHEDULE_DEFINITION, schema),
            message.schedule_id,
            _json(definition),
            message.definition.handler,
            list(message.definition.tags),
            message.next_fire_at,
            at,
        )
        change = "updated"
    await _timeline(conn, schema, fact, message.schedule_id, change, definition)


async def _schedule_changed(
    conn: Conn, schema: str, fact: Fact, message: SchedulePaused | ScheduleResumed | ScheduleDeleted
) -> None:
    at = fact.envelope.occurred_at
    if isinstance(message, SchedulePaused):
        change = "paused"
        await conn.execute(
            sql(PAUSE_SCHEDULE, schema),
            message.schedule_id,
            message.reason,
            message.resume_at,
            at,
        )
    elif isinstance(message, ScheduleResumed):
        change = "resumed"
        await conn.execute(
            sql(RESUME_SCHEDULE, schema),
            message.schedule_id,
            message.next_fire_at,
            at,
        )
    else:
        change = "deleted"
        await conn.execute(
            sql(MARK_SCHEDULE_DELETED, schema),
            message.schedule_id,
            at,
        )
    await _timeline(conn, schema, fact, message.schedule_id, change, None)


async def _timeline(
    conn: Conn, schema: str, fact: Fact, schedule_id: str, change: str, definition: dict[str, Any] | None
) -> None:
    # A paused create records two changes from one event; the suffix keeps both rows unique.
    event_id = fact.envelope.id if change != "paused" or definition is None else f"{fact.envelope.id}#paused"
    await conn.execute(
        sql(INSERT_TIMELINE_CHANGE, schema),
        schedule_id,
        event_id,
        fact.record.offset,
        fact.envelope.occurred_at,
        change,
        _json(definition) if definition is not None else None,
    )


# -- claimers ----------------------------------------------------------------------------------


async def _claimer(conn: Conn, schema: str, fact: Fact, message: ClaimerAnnounced) -> None:
    await conn.execute(
        sql(UPSERT_CLAIMER, schema),
        message.claimer_id,
        list(message.handlers),
        int(message.interval.total_seconds() * 1000),
        message.started_at,
        fact.envelope.occurred_at,
    )


# -- downstreams -------------------------------------------------------------------------------


async def _downstream_changed(conn: Conn, schema: str, fact: Fact, message: DownstreamChanged) -> None:
    await conn.execute(
        sql(INSERT_DOWNSTREAM_CHANGE, schema),
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
        sql(UPSERT_DOWNSTREAM_CHANGED, schema),
        message.downstream,
        message.to_state,
        message.manual,
        message.settings.model_dump_json(exclude_none=True),
        message.held,
        message.at,
    )


async def _downstream_reported(conn: Conn, schema: str, fact: Fact, message: DownstreamReported) -> None:
    await conn.execute(
        sql(UPSERT_DOWNSTREAM_REPORTED, schema),
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


async def _command_seen(conn: Conn, schema: str, fact: Fact) -> None:
    status = "pending" if fact.envelope.type in ACKNOWLEDGED_COMMANDS else "published"
    # A backfill's range: what the api's cap on backfills in flight per schedule counts by.
    backfill = fact.message if isinstance(fact.message, Backfill) else None
    await conn.execute(
        sql(UPSERT_COMMAND_SEEN, schema),
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


#: Commands whose acceptance says what they did (the dlq's: "redrove 3 dead letter(s); ..."),
#: kept as the command's `summary`.
DETAILED = frozenset(m.message_type for m in DLQ_COMMAND_TYPES)


async def _acknowledged(
    conn: Conn, schema: str, fact: Fact, message: CommandAccepted | CommandRejected
) -> None:
    accepted = isinstance(message, CommandAccepted)
    await conn.execute(
        sql(UPSERT_ACKNOWLEDGED, schema),
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
            sql(UPSERT_WORKFLOW_START_REJECTED, schema),
            message.subject,
            message.reason,
            fact.envelope.occurred_at,
        )


async def _acknowledged_by_dlq(conn: Conn, schema: str, fact: Fact, command_id: str) -> None:
    await conn.execute(
        sql(UPSERT_ACCEPTED_BY_DLQ, schema),
        command_id,
        fact.envelope.occurred_at,
    )


# -- dead letters -------------------------------------------------------------------------------


async def _dead_letter(conn: Conn, schema: str, m: DeadLetterStatusChanged) -> None:
    await conn.execute(
        sql(UPSERT_DEAD_LETTER, schema),
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
        sql(MERGE_TIMER, schema),
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


async def _workflow_command(
    conn: Conn,
    schema: str,
    fact: Fact,
    message: StartWorkflow | SignalWorkflow | CancelWorkflow | TerminateWorkflow,
) -> None:
    at = fact.envelope.occurred_at
    if isinstance(message, StartWorkflow):
        await conn.execute(
            sql(UPSERT_WORKFLOW_REQUESTED, schema),
            message.workflow_id,
            message.workflow_type,
            _json(message.input),
            at,
            _json(message.memo),
            _json(dump_search_attributes(message.search_attributes)),
        )
    elif isinstance(message, CancelWorkflow):
        await conn.execute(
            sql(MARK_WORKFLOW_CANCEL, schema),
            message.workflow_id,
            message.reason,
            at,
        )
    await _history(conn, schema, message.workflow_id, fact, "command", None)


async def _history(
    conn: Conn, schema: str, workflow_id: str, fact: Fact, origin: str, sequence: int | None
) -> None:
    await conn.execute(
        sql(INSERT_HISTORY_ENTRY, schema),
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
