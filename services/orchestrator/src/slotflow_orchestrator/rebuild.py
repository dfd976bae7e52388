"""The orchestrator's schema rebuilt from the topics, and the tables checked against the topic.

`slotflow-orchestrator rebuild` (every orchestrator stopped, the schema empty or dropped) puts
back what the orchestrator needs to go on, each piece from where it lives on Kafka:

- **workflows and history**: the history topic (`slotflow.workflows.history.v1`, kept forever),
  read from its first record to its end; each workflow's row is derived from its history: type,
  status, last sequence and start command from the newest chain start, `started_at` and
  `closed_at` from the envelopes' `occurred_at`, the execution deadline from
  `WorkflowStarted.execution_deadline`. Every shard's lease row gets a lease token above any an
  orchestrator could hold from before (the database clock in milliseconds), so a forgotten
  orchestrator still running on the old token is refused.
- **the inbox**: every command the history applied (`WorkflowStarted`, `SignalReceived`,
  `CancelRequested` name their command) or the orchestrator answered (`CommandAccepted` /
  `CommandRejected` on `slotflow.workflows.events.v1`): a command the topics show as handled is
  never applied again.
- **inputs**: the input topics (workflow commands, run events, timer events) are read from their
  first retained record to their end and admitted as the intake admits them (`intake.admit`):
  commands not yet handled, and activity outcomes and timer firings that name something the
  rebuilt history leaves pending. That covers inputs consumed but not applied when the schema was
  lost, and inputs of decisions whose history never reached the topic. Later records are the
  intake's, which collapses the overlap in the inbox. A child's end, staged for its parent in the
  child's own decision and never on Kafka, is derived from the child's history (`parent_notice`).
- **outbox rows not yet relayed**: the relay sends a decision's history before any of its other
  records (`OutboxRelay.first_topics`), so whatever else the lost outbox held was the effect of
  history on the topic: each open workflow's pending activities, timers and children are sent
  again under their ids (`Outbound.reissue`), which their readers collapse.
- **activity cancels**: the orchestrator's record of each activity cancel (`activity_cancels`, what
  a claimer checks a CancelActivity against before it stops anything) is not on Kafka. The
  activities each run left pending when it ended (within `history_retention_days`, as long as the
  record is kept) are recorded again and their CancelActivity sent again under its id, which a
  claimer takes once; without it, a cancel still on its topic would be parked as unproven and the
  run would go on. What an open run's code abandoned is asked again when it is decided anew.
- **decisions never relayed**: lost with the schema, and nothing of them reached Kafka (the
  history goes first). Every open workflow is decided once more (`redecide`), with the inputs
  above: deterministic replay makes the missing decisions again, with the same sequences, so the
  same activity run ids (`{workflow_id}/{sequence}`), and the claimer runs a run id once.

`slotflow-orchestrator check` compares the tables with the topic: every workflow's history, event
by event, and its row (type, status, last sequence, start command, execution deadline) with what
the topic derives; events still in the outbox are counted as in flight, not as a difference.

The payload table (`payloads`, large history payloads by reference) is not on Kafka: a rebuild
keeps it when only the other tables were lost (`--force`), and reports the workflows whose
references it cannot resolve when the schema went with it.
"""

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from slotflow.contracts import (
    REGISTRY,
    ActivityScheduled,
    CancelRequested,
    CancelWorkflow,
    CommandAccepted,
    CommandRejected,
    HistoryEvent,
    RunCompleted,
    RunDeadLettered,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    TimerFired,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowStarted,
    wrap,
)
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.timers import execution_timer_id
from slotflow.contracts.topics import (
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
    WORKFLOW_HISTORY,
)
from slotflow.errors import PoisonMessage, SlotflowError
from slotflow.history import OpenWork
from slotflow.kafka.loop import Incoming
from slotflow.kafka.poison import decode_record
from slotflow.kafka.producer import Producer
from slotflow.kafka.reading import read_to_end
from slotflow.pg.outbox import Staged, append_encoded, encoded
from slotflow.pg.pool import Conn, Pool, wait_for_pool
from slotflow.pg.statements import sql
from slotflow.principals import CommandVerifier, KafkaKeyRing, UnprovenCommand
from slotflow_orchestrator.app import ACCEPTED, apply_migrations
from slotflow_orchestrator.config import Settings
from slotflow_orchestrator.deciding import Decisions
from slotflow_orchestrator.inputs import ChildOutcome
from slotflow_orchestrator.intake import COMMANDS, admit, shard_of
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.sql import (
    CLEAR,
    HAS_STATE,
    IN_FLIGHT,
    INSERT_HISTORY,
    INSERT_ROWS,
    OPEN_WORKFLOWS,
    REBUILD_TOKEN,
    RECORD_ACTIVITY_CANCELS,
    RECORD_INPUTS,
    SEED_INBOX,
    SEED_LEASES,
    TABLE_HISTORY,
    TABLE_ROWS,
)
from slotflow_orchestrator.stepping import (
    CHILD_NOT_STARTED,
    Ack,
    Status,
    WorkflowCode,
    abandoned_by_ended_runs,
    parent_notice,
)
from slotflow_orchestrator.workflow_code import child_start_id

T = TypeVar("T")

log = logging.getLogger(__name__)


class RebuildRefused(SlotflowError):
    """The schema holds state a rebuild would overwrite (pass `--force` to replace it)."""


#: Rows written per statement.
CHUNK = 5000
#: Decisions of one shard per transaction in the rebuild's decision pass.
DECISIONS_PER_TRANSACTION = 128


@dataclass
class TopicHistory:
    """Every workflow's history as the topic holds it: each sequence's first copy, in order."""

    events: dict[str, dict[int, HistoryEvent]] = field(default_factory=lambda: defaultdict(dict))
    #: When each event's decision happened (its envelope's `occurred_at`).
    stamps: dict[str, dict[int, datetime]] = field(default_factory=lambda: defaultdict(dict))
    #: The stored JSON of each event (the envelope's `data`, as the table keeps it).
    texts: dict[str, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    records: int = 0
    undecodable: int = 0

    def contiguous(self, workflow_id: str) -> list[HistoryEvent]:
        """The workflow's history from sequence 1 up to the first missing sequence."""
        by_sequence = self.events[workflow_id]
        out: list[HistoryEvent] = []
        while (event := by_sequence.get(len(out) + 1)) is not None:
            out.append(event)
        return out

    def gap(self, workflow_id: str) -> int | None:
        """The first missing sequence when events past it are on the topic, else None."""
        held = self.events[workflow_id]
        first_missing = len(self.contiguous(workflow_id)) + 1
        return first_missing if held and max(held) >= first_missing else None


async def read_history(settings: Settings) -> TopicHistory:
    """The history topic from its first record to the end it had when the read began."""
    kafka = settings.kafka
    out = TopicHistory()
    for record in await read_to_end(kafka, kafka.topic(WORKFLOW_HISTORY), client_id="orchestrator-rebuild"):
        out.records += 1
        try:
            envelope = decode(record.value or b"")
            event = REGISTRY.parse(envelope, stored=True)
        except (SlotflowError, ValueError) as err:
            out.undecodable += 1
            log.warning(
                "history record %s:%d is not a history event: %s", record.partition, record.offset, err
            )
            continue
        if not isinstance(event, HistoryEvent):
            out.undecodable += 1
            continue
        # A relay that republished after a crash wrote the same event twice: the first copy counts.
        if event.sequence not in out.events[event.workflow_id]:
            out.events[event.workflow_id][event.sequence] = event
            out.stamps[event.workflow_id][event.sequence] = envelope.occurred_at
            out.texts[event.workflow_id][event.sequence] = json.dumps(envelope.data, separators=(",", ":"))
    return out


@dataclass(frozen=True, slots=True)
class DerivedRow:
    """A workflow's row as its history derives it (what `deciding` would have written)."""

    workflow_id: str
    workflow_type: str
    status: Status
    last_sequence: int
    start_command_id: str
    started_at: datetime
    closed_at: datetime | None
    execution_deadline: datetime | None
    work: OpenWork


def derive_row(
    workflow_id: str, events: Sequence[HistoryEvent], stamps: Mapping[int, datetime]
) -> DerivedRow | None:
    """The row of a history (None without a WorkflowStarted at sequence 1)."""
    if not events or not isinstance(events[0], WorkflowStarted):
        return None
    work = OpenWork.of(events)
    # The row describes the newest chain: the run a StartWorkflow began, and the runs continued from it.
    chain = events[work.chain_start - 1]
    if not isinstance(chain, WorkflowStarted):
        return None
    status: Status
    if work.end is not None:
        end = work.end
        status = (
            "completed"
            if isinstance(end, WorkflowCompleted)
            else "cancelled"
            if isinstance(end, WorkflowCancelled)
            else "failed"
        )
    else:
        status = "stuck" if work.diverged else "running"
    return DerivedRow(
        workflow_id=workflow_id,
        workflow_type=chain.workflow_type,
        status=status,
        last_sequence=len(events),
        start_command_id=chain.command_id,
        started_at=stamps[chain.sequence],
        closed_at=stamps[work.end.sequence] if work.end is not None else None,
        execution_deadline=chain.execution_deadline,
        work=work,
    )


@dataclass
class RebuildReport:
    """What a rebuild read and wrote, and what it could not do."""

    history_records: int = 0
    workflows: int = 0
    open_workflows: int = 0
    history_events: int = 0
    handled_commands: int = 0
    inputs: int = 0
    child_outcomes: int = 0
    #: Cancels of activities that ended runs abandoned, recorded and sent again.
    activity_cancels: int = 0
    reissued: int = 0
    decided: int = 0
    seconds: float = 0.0
    #: Workflows the rebuild could not restore or decide, with why.
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        rate = self.history_events / self.seconds if self.seconds else 0.0
        return [
            f"history topic: {self.history_records} records, {self.history_events} events of "
            f"{self.workflows} workflows ({self.open_workflows} open)",
            f"inbox: {self.handled_commands} commands already handled; inputs admitted: {self.inputs} "
            f"(+{self.child_outcomes} child outcomes)",
            f"reissued: {self.reissued} records for open work ({self.activity_cancels} activity cancels "
            f"of ended runs); decided again: {self.decided} workflows",
            f"took {self.seconds:.2f} s ({rate:.0f} events/s)",
            *(f"problem: {p}" for p in self.problems),
        ]


async def rebuild(
    settings: Settings, *, workflow_code: WorkflowCode, force: bool = False, pool: "Pool | None" = None
) -> RebuildReport:
    """Rebuild the orchestrator's schema from the topics (see the module docstring).

    Raises:
        RebuildRefused: the schema holds state and ``force`` is not set.
    """
    began = time.monotonic()
    own_pool = pool is None
    if pool is None:
        pool = await wait_for_pool(settings.postgres, min_size=1, max_size=4)
    try:
        report = await _rebuild(settings, pool, workflow_code=workflow_code, force=force)
    finally:
        if own_pool:
            await pool.close()
    report.seconds = time.monotonic() - began
    return report


async def _rebuild(
    settings: Settings, pool: Pool, *, workflow_code: WorkflowCode, force: bool
) -> RebuildReport:
    cfg = settings.orchestrator
    kafka = settings.kafka
    schema = cfg.db_schema
    report = RebuildReport()
    await apply_migrations(pool, schema)
    if await pool.fetchval(sql(HAS_STATE, schema)):
        if not force:
            raise RebuildRefused(
                f"schema {schema} holds workflows, history, waiting inputs or unrelayed events: a rebuild "
                "would replace them (stop every orchestrator, then pass --force to rebuild anyway)"
            )
        await pool.execute(sql(CLEAR, schema))
    commands_topic = kafka.topic(WORKFLOW_COMMANDS)
    # The orchestrator keeps its record of a cancel as long as a closed workflow's history.
    retention = timedelta(days=cfg.history_retention_days)
    # Read everything first: nothing is written until every topic was read.
    topic = await read_history(settings)
    answers = await _answers(settings)
    inputs = await _inputs(settings)
    shards = await _partitions(settings, commands_topic)
    report.history_records = topic.records
    rows: dict[str, DerivedRow] = {}
    histories: dict[str, list[HistoryEvent]] = {}
    for workflow_id in sorted(topic.events):
        events = topic.contiguous(workflow_id)
        gap = topic.gap(workflow_id)
        if gap is not None:
            report.problems.append(f"{workflow_id}: the topic has no event {gap}; rebuilt up to {gap - 1}")
        row = derive_row(workflow_id, events, topic.stamps[workflow_id])
        if row is None:
            report.problems.append(f"{workflow_id}: the topic holds no WorkflowStarted at sequence 1")
            continue
        rows[workflow_id] = row
        histories[workflow_id] = events
    handled = _handled(histories.values(), answers)
    outbound = Outbound(kafka, signer=settings.signatures.service_signer("orchestrator"))
    owner = f"rebuild:{cfg.instance_id}"
    keys: KafkaKeyRing | None = None
    verifier: CommandVerifier | None = None
    if settings.signatures.required:
        # A command re-read from the topic becomes an input only as the intake would take it.
        keys = KafkaKeyRing(kafka, client_id="orchestrator-rebuild")
        await keys.start()
        verifier = CommandVerifier(settings.signatures, keys)
        await verifier.refresh()
    try:
        async with pool.acquire() as conn, conn.transaction():
            token = int(await conn.fetchval(REBUILD_TOKEN))
            now: datetime = await conn.fetchval("SELECT now()")
            await conn.execute(sql(SEED_LEASES, schema), shards, owner, token)
            await _write_rows(conn, schema, rows.values(), shards=shards, token=token)
            report.history_events = await _write_history(conn, schema, topic, rows, token=token)
            report.handled_commands = len(handled)
            for ids in _chunks(sorted(handled)):
                await conn.execute(
                    sql(SEED_INBOX, schema),
                    [f"{commands_topic}:{command_id}" for command_id in ids],
                    commands_topic,
                )
            wanted = [i for i in inputs if _still_wanted(i, rows)]
            refuse = _refusal(verifier, now) if verifier is not None else None
            for chunk in _chunks(wanted):
                admitted = await admit(conn, schema=schema, shards=shards, batch=chunk, refuse=refuse)
                report.inputs += len(admitted.types)
                # A command never consumed whose principal is not proven: answered as the intake would.
                rejections = [
                    outbound.rejection(
                        incoming.envelope.id,
                        incoming.envelope.type,
                        str(getattr(incoming.message, "workflow_id", incoming.envelope.key)),
                        reason,
                        now,
                    )
                    for incoming, reason in admitted.refused
                ]
                await append_encoded(conn, schema=schema, rows=[encoded(r) for r in rejections])
            report.child_outcomes = await _child_outcomes(conn, schema, rows, answers, shards=shards, now=now)
            staged: list[Staged] = []
            shard_keys: list[str] = []
            for row in rows.values():
                unanswered = (
                    [
                        Ack(command_id, command_type, row.workflow_id)
                        for command_id, command_type in _applied_commands(histories[row.workflow_id])
                        if command_id not in answers.answered
                    ]
                    if not row.work.ended
                    else []
                )
                records = outbound.reissue(
                    row.workflow_id,
                    row.work,
                    execution_deadline=row.execution_deadline if not row.work.ended else None,
                    unanswered=unanswered,
                    now=now,
                )
                staged.extend(records)
                shard_keys.extend([row.workflow_id] * len(records))
            cancels = _lost_cancels(rows, histories, topic, since=now - retention)
            report.activity_cancels = len(cancels)
            for group in _chunks(cancels):
                await conn.execute(
                    sql(RECORD_ACTIVITY_CANCELS, schema),
                    [a.workflow_id for a, _ in group],
                    [a.sequence for a, _ in group],
                    [a.run_id for a, _ in group],
                    [a.activity for a, _ in group],
                    [reason[:1000] for _, reason in group],
                )
            for activity, reason in cancels:
                staged.append(outbound.activity_cancel(activity, reason, now))
                shard_keys.append(activity.workflow_id)
            for start in range(0, len(staged), CHUNK):
                await append_encoded(
                    conn,
                    schema=schema,
                    rows=[encoded(s) for s in staged[start : start + CHUNK]],
                    shard_keys=shard_keys[start : start + CHUNK],
                )
            report.reissued = len(staged)
    finally:
        if keys is not None:
            await keys.stop()
    report.workflows = len(rows)
    report.open_workflows = sum(1 for r in rows.values() if r.status in ("running", "stuck"))
    report.decided = await _decide_open(
        settings, pool, workflow_code, outbound, shards=shards, token=token, report=report
    )
    return report


@dataclass
class _Answers:
    """The orchestrator's answers on its events topic: which commands it handled."""

    answered: set[str] = field(default_factory=set)
    #: Why each rejected command was rejected (a refused child start becomes its parent's input).
    rejected: dict[str, str] = field(default_factory=dict)


async def _answers(settings: Settings) -> _Answers:
    out = _Answers()
    kafka = settings.kafka
    for record in await read_to_end(kafka, kafka.topic(WORKFLOW_EVENTS), client_id="orchestrator-rebuild"):
        try:
            _, message = decode_record(record, accept=(CommandAccepted, CommandRejected))
        except PoisonMessage:
            continue
        if isinstance(message, CommandAccepted | CommandRejected):
            out.answered.add(message.command_id)
            if isinstance(message, CommandRejected):
                out.rejected[message.command_id] = message.reason
    return out


async def _inputs(settings: Settings) -> list[Incoming]:
    """Every decodable record of the three input topics, in each partition's order."""
    kafka = settings.kafka
    out: list[Incoming] = []
    for name in (WORKFLOW_COMMANDS, RUN_EVENTS, TIMER_EVENTS):
        for record in await read_to_end(kafka, kafka.topic(name), client_id="orchestrator-rebuild"):
            try:
                envelope, message = decode_record(record, accept=ACCEPTED, max_bytes=kafka.max_message_bytes)
            except PoisonMessage:
                continue  # parked in the DLQ when the intake first met it
            out.append(Incoming(record, envelope, message))
    return out


async def _partitions(settings: Settings, topic: str) -> int:
    async with Producer(settings.kafka, client_id="orchestrator-rebuild") as producer:
        return await producer.partition_count(topic)


def _applied_commands(events: Iterable[HistoryEvent]) -> list[tuple[str, str]]:
    """The commands a history applied, with their types (an answer is `{command_id}/accepted`)."""
    out: list[tuple[str, str]] = []
    for event in events:
        if isinstance(event, WorkflowStarted) and event.continued_from is None:
            out.append((event.command_id, StartWorkflow.message_type))
        elif isinstance(event, SignalReceived) and event.command_id is not None:
            out.append((event.command_id, SignalWorkflow.message_type))
        elif isinstance(event, CancelRequested) and event.command_id is not None:
            out.append((event.command_id, CancelWorkflow.message_type))
    return out


def _handled(histories: Iterable[Sequence[HistoryEvent]], answers: _Answers) -> set[str]:
    """Command ids never to apply again: applied by a history, or answered."""
    handled = set(answers.answered)
    for events in histories:
        handled.update(command_id for command_id, _ in _applied_commands(events))
    return handled


def _refusal(verifier: CommandVerifier, now: datetime) -> Callable[[Incoming], str | None]:
    """Why a re-read command may not become an input (its principal is not proven), as the intake
    judges it (`OrchestratorService._refusal`)."""

    def refuse(incoming: Incoming) -> str | None:
        try:
            verifier.verify(incoming.envelope, topic=incoming.record.topic, now=now)
        except UnprovenCommand as refusal:
            return str(refusal)
        return None

    return refuse


def _lost_cancels(
    rows: Mapping[str, DerivedRow],
    histories: Mapping[str, Sequence[HistoryEvent]],
    topic: TopicHistory,
    *,
    since: datetime,
) -> list[tuple[ActivityScheduled, str]]:
    """The activity cancels that runs ended since ``since`` asked for: the orchestrator's record of
    each (what a claimer checks a CancelActivity against) died with the schema, and the request
    may have died in the outbox or still wait on its topic. The current run's own abandoned
    activities are asked again when it is decided anew (`stepping`, `abandoned_earlier`)."""
    out: list[tuple[ActivityScheduled, str]] = []
    for workflow_id in rows:
        stamps = topic.stamps[workflow_id]
        for activity, reason, ending in abandoned_by_ended_runs(workflow_id, histories[workflow_id]):
            if stamps[ending.sequence] >= since:
                out.append((activity, reason))
    return out


def _still_wanted(incoming: Incoming, rows: Mapping[str, DerivedRow]) -> bool:
    """Whether a re-read input can still change anything: a command (the inbox drops the handled
    ones), or an outcome or firing naming something the rebuilt history leaves pending (any other
    is late or a duplicate, and a decision would drop it)."""
    message = incoming.message
    if isinstance(message, COMMANDS):
        return True
    if isinstance(message, RunCompleted | RunDeadLettered):
        row = rows.get(message.workflow_id or "")
        return row is not None and not row.work.ended and message.sequence in row.work.activities
    if isinstance(message, TimerFired):
        row = rows.get(message.owner)
        if row is None or row.work.ended:
            return False
        work = row.work
        return (
            message.sequence in work.timers
            or message.sequence in work.activities
            or message.timer_id == execution_timer_id(message.owner, work.chain_start)
        )
    return False


async def _write_rows(
    conn: Conn, schema: str, rows: Iterable[DerivedRow], *, shards: int, token: int
) -> None:
    statement = sql(INSERT_ROWS, schema)
    for chunk in _chunks(list(rows)):
        await conn.execute(
            statement,
            [r.workflow_id for r in chunk],
            [shard_of(r.workflow_id, shards) for r in chunk],
            [r.workflow_type for r in chunk],
            [r.status for r in chunk],
            [r.last_sequence for r in chunk],
            [r.start_command_id for r in chunk],
            [r.started_at for r in chunk],
            [r.closed_at for r in chunk],
            [r.execution_deadline for r in chunk],
            token,
        )


async def _write_history(
    conn: Conn, schema: str, topic: TopicHistory, rows: Mapping[str, DerivedRow], *, token: int
) -> int:
    statement = sql(INSERT_HISTORY, schema)
    flat = [
        (
            workflow_id,
            sequence,
            topic.events[workflow_id][sequence].message_type,
            topic.texts[workflow_id][sequence],
        )
        for workflow_id, row in rows.items()
        for sequence in range(1, row.last_sequence + 1)
    ]
    for chunk in _chunks(flat):
        w, s, t, d = zip(*chunk, strict=True)
        await conn.execute(statement, list(w), list(s), list(t), list(d), token)
    return len(flat)


async def _child_outcomes(
    conn: Conn,
    schema: str,
    rows: Mapping[str, DerivedRow],
    answers: _Answers,
    *,
    shards: int,
    now: datetime,
) -> int:
    """A child's end for each open parent still waiting on it: staged in the child's decision and
    lost with the schema, derived again from the child's history (or from the answer that refused
    its start), under the id the child's decision gave it."""
    envelopes = []
    for parent in rows.values():
        if parent.work.ended:
            continue
        for sequence, child in parent.work.children.items():
            found = rows.get(child.child_workflow_id)
            run = found.work.run if found is not None else None
            if (
                found is not None
                and run is not None
                and (run.parent_workflow_id, run.parent_sequence)
                == (
                    parent.workflow_id,
                    sequence,
                )
            ):
                notice = parent_notice(found.workflow_id, found.work)
                if notice is not None:
                    envelopes.append(
                        wrap(
                            notice.outcome,
                            id=f"{found.workflow_id}#{notice.end_sequence}/parent",
                            key=parent.workflow_id,
                            source="orchestrator",
                            occurred_at=now,
                        )
                    )
                continue
            reason = answers.rejected.get(child_start_id(parent.workflow_id, sequence))
            if reason is not None:
                outcome = ChildOutcome(
                    parent_workflow_id=parent.workflow_id,
                    parent_sequence=sequence,
                    child_workflow_id=child.child_workflow_id,
                    outcome="failed",
                    error_type=CHILD_NOT_STARTED,
                    message=reason,
                )
                envelopes.append(
                    wrap(
                        outcome,
                        id=f"{child.child_workflow_id}#0/parent",
                        key=parent.workflow_id,
                        source="orchestrator",
                        occurred_at=now,
                    )
                )
    if envelopes:
        parents = [str(e.key) for e in envelopes]
        await conn.execute(
            sql(RECORD_INPUTS, schema),
            parents,
            [shard_of(p, shards) for p in parents],
            [e.type for e in envelopes],
            [encode(e) for e in envelopes],
        )
    return len(envelopes)


async def _decide_open(
    settings: Settings,
    pool: Pool,
    workflow_code: WorkflowCode,
    outbound: Outbound,
    *,
    shards: int,
    token: int,
    report: RebuildReport,
) -> int:
    """Every open workflow decided once more, with its rebuilt inputs, under the rebuild's lease
    token: decisions whose history was lost are made again, and what they send is staged."""
    cfg = settings.orchestrator
    decisions = Decisions(
        pool,
        schema=cfg.db_schema,
        workflow_code=workflow_code,
        outbound=outbound,
        metrics=OrchestratorMetrics(),
        shards=shards,
        payload_threshold=cfg.payload_threshold_bytes,
        activity_payloads_schema=cfg.activity_payloads_schema,
    )
    by_shard: dict[int, list[str]] = defaultdict(list)
    for record in await pool.fetch(sql(OPEN_WORKFLOWS, cfg.db_schema)):
        by_shard[record["shard"]].append(record["workflow_id"])
    decided = 0
    for shard, workflow_ids in sorted(by_shard.items()):
        for start in range(0, len(workflow_ids), DECISIONS_PER_TRANSACTION):
            group = workflow_ids[start : start + DECISIONS_PER_TRANSACTION]
            try:
                await decisions.decide_many(group, shard=shard, token=token, redecide=True)
                decided += len(group)
                continue
            except SlotflowError as err:
                log.warning("rebuild: a decision group of shard %d failed (%s); one at a time", shard, err)
            for workflow_id in group:
                try:
                    await decisions.decide(workflow_id, shard=shard, token=token, redecide=True)
                    decided += 1
                except SlotflowError as err:
                    report.problems.append(f"{workflow_id}: not decided after the rebuild: {err}")
    return decided


def _chunks(items: Sequence[T]) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


# -- check --------------------------------------------------------------------------------------


@dataclass
class CheckReport:
    """The tables against the topic: counts, events in flight, and every difference."""

    topic_workflows: int = 0
    table_workflows: int = 0
    topic_events: int = 0
    table_events: int = 0
    in_flight: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.differences

    def lines(self, limit: int = 50) -> list[str]:
        head = [
            f"topic: {self.topic_events} events of {self.topic_workflows} workflows; tables: "
            f"{self.table_events} history rows of {self.table_workflows} workflows; "
            f"{self.in_flight} events in the outbox, not yet relayed",
            "tables and topic agree" if self.agree else f"{len(self.differences)} difference(s):",
        ]
        shown = [f"  {d}" for d in self.differences[:limit]]
        if len(self.differences) > limit:
            shown.append(f"  ... and {len(self.differences) - limit} more")
        return head + shown


async def check(settings: Settings, *, pool: "Pool | None" = None) -> CheckReport:
    """Compare the orchestrator's tables with the history topic (module docstring)."""
    own_pool = pool is None
    if pool is None:
        pool = await wait_for_pool(settings.postgres, min_size=1, max_size=2)
    try:
        schema = settings.orchestrator.db_schema
        history_topic = settings.kafka.topic(WORKFLOW_HISTORY)
        # The tables first: whatever the topic lacks then is either still in the outbox, or missing.
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            table_rows = {r["workflow_id"]: r for r in await conn.fetch(sql(TABLE_ROWS, schema))}
            table_history: dict[str, dict[int, tuple[str, str]]] = defaultdict(dict)
            for r in await conn.fetch(sql(TABLE_HISTORY, schema)):
                table_history[r["workflow_id"]][r["sequence"]] = (r["type"], r["data"])
            flying = {i for r in await conn.fetch(sql(IN_FLIGHT, schema), history_topic) for i in r["ids"]}
        topic = await read_history(settings)
    finally:
        if own_pool:
            await pool.close()
    return compare(table_rows, table_history, flying, topic)


def compare(
    table_rows: Mapping[str, Any],
    table_history: Mapping[str, Mapping[int, tuple[str, str]]],
    in_flight: set[str],
    topic: TopicHistory,
) -> CheckReport:
    """The differences between the tables and the topic's histories."""
    report = CheckReport(
        topic_workflows=len(topic.events),
        table_workflows=len(table_rows),
        topic_events=sum(len(e) for e in topic.events.values()),
        table_events=sum(len(h) for h in table_history.values()),
    )
    if topic.undecodable:
        report.differences.append(
            f"{topic.undecodable} record(s) on the history topic are not history events"
        )
    differ = report.differences.append
    for workflow_id in sorted(set(table_rows) | set(topic.events)):
        row = table_rows.get(workflow_id)
        on_topic = topic.events.get(workflow_id, {})
        in_table = table_history.get(workflow_id, {})
        flying = 0
        for sequence, (type_, data) in sorted(in_table.items()):
            event = on_topic.get(sequence)
            if event is None:
                if f"{workflow_id}#{sequence}" in in_flight:
                    flying += 1
                else:
                    differ(f"{workflow_id} #{sequence} {type_}: in the table, not on the topic")
                continue
            if event.message_type != type_ or json.loads(data) != json.loads(
                topic.texts[workflow_id][sequence]
            ):
                differ(
                    f"{workflow_id} #{sequence}: the table holds {type_}, the topic {event.message_type} with other data"
                )
        report.in_flight += flying
        purged = row is not None and bool(row["purged"])
        if not purged:
            for sequence in sorted(set(on_topic) - set(in_table)):
                differ(
                    f"{workflow_id} #{sequence} {on_topic[sequence].message_type}: on the topic, not in the table"
                )
        gap = topic.gap(workflow_id) if on_topic else None
        if gap is not None:
            differ(f"{workflow_id}: the topic has no event {gap}")
        if row is None:
            differ(f"{workflow_id}: on the topic, no row in the table")
            continue
        if not on_topic:
            if not flying:
                differ(f"{workflow_id}: a row in the table, nothing on the topic")
            continue
        if flying:
            continue  # the row describes events the topic does not hold yet
        derived = derive_row(workflow_id, topic.contiguous(workflow_id), topic.stamps[workflow_id])
        if derived is None:
            differ(f"{workflow_id}: the topic holds no WorkflowStarted at sequence 1")
            continue
        fields = {
            "workflow_type": derived.workflow_type,
            "status": derived.status,
            "last_sequence": derived.last_sequence,
            "start_command_id": derived.start_command_id,
        }
        # Recorded on WorkflowStarted since the rebuild exists: older histories cannot say.
        if derived.execution_deadline is not None:
            fields["execution_deadline"] = derived.execution_deadline
        for name, expected in fields.items():
            if row[name] != expected:
                differ(f"{workflow_id}: {name} is {row[name]!r} in the table, {expected!r} by the topic")
    return report
