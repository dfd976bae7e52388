"""The decision transaction: one workflow, one PostgreSQL transaction, nothing half-applied.

In one transaction, under the shard's lease:

1. check the lease still carries this orchestrator's lease token (FOR SHARE: an acquisition by
   another orchestrator waits for this transaction, and every later one of ours is refused);
2. lock the workflow's row and its waiting inputs, reading with them the claimer's record of every
   run an activity outcome among them names (`slotflow.issuers`: an outcome counts only as far as
   that record backs it);
3. read its history, step it (`stepping.step`, pure) with the database clock's `now()`;
4. append the new history rows, update the row, delete the applied inputs, and stage every
   outward record (history, JobDue, StartTimer/CancelTimer, child starts, acknowledgements) in the
   outbox, and every refused input's dead letter (its inbox id forgotten, so a genuine record
   under the same id is still taken).

A crash before the commit leaves the inputs waiting and nothing staged; after it, the outbox
relay publishes what was staged. So no decision is lost and none is made twice.
"""

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from slotflow import tracing
from slotflow.contracts import (
    REGISTRY,
    HistoryEvent,
    JobDue,
    RedriveRequested,
    RetryActivity,
    RunCompleted,
    RunDeadLettered,
    WorkflowStarted,
    wrap,
)
from slotflow.contracts.acceptance import STORED
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.workflows import PAYLOAD_REF_KEY, is_payload_ref
from slotflow.errors import SlotflowError
from slotflow.issuers import RunRecord
from slotflow.kafka.records import Record
from slotflow.pg.outbox import Encoded, Staged, append_encoded, encoded, traced, with_headers
from slotflow.pg.payloads import get_payload, put_payload
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import compose, quote_ident, sql
from slotflow.workflow.payloads import DEFAULT_THRESHOLD, offload_payloads, resolve_payloads
from slotflow_orchestrator.inputs import INPUT_MESSAGES
from slotflow_orchestrator.intake import backed_run_id, inbox_id, shard_of
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.sql import (
    APPEND,
    CLAIMER_READY,
    CLAIMER_RUNS,
    CREATE_ROWS,
    DROP_INPUTS,
    FORGET_SEEN,
    HISTORY,
    LEASE_CHECK,
    LOCK_INPUTS,
    LOCK_INPUTS_ALONE,
    LOCK_ROWS,
    ORIGINS,
    RECORD_ACTIVITY_CANCELS,
    RECORD_INPUTS,
    RESTART_ROWS,
    UPDATE_ROWS,
)
from slotflow_orchestrator.stepping import Input, Refusal, Row, Step, WorkflowCode, step

log = logging.getLogger(__name__)


class LeaseLost(SlotflowError):
    """Another orchestrator took the shard's lease (a higher lease token): this one must stop
    deciding for it. Nothing of the refused decision was written."""

    def __init__(self, shard: int, token: int, current: int | None) -> None:
        super().__init__(f"lease of shard {shard} moved on (ours {token}, now {current})")
        self.shard = shard


#: The instrumentation scope of the orchestrator's spans.
TRACE_SCOPE = "slotflow.orchestrator"

#: Histories kept from this process's own commits (workflows, least recently decided go first).
HISTORY_CACHE_SIZE = 20_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one decision did (for metrics and the caller's relay wake-up)."""

    step: Step | None
    inputs: int


class _InTransaction:
    """The payload table through the decision's own connection: an offloaded payload commits (or
    vanishes) with the history event that references it."""

    def __init__(self, conn: Conn, schema: str) -> None:
        self._conn = conn
        self._schema = schema

    async def put(self, data: bytes) -> str:
        return await put_payload(self._conn, schema=self._schema, data=data)

    async def get(self, ref: str) -> bytes:
        return await get_payload(self._conn, schema=self._schema, ref=ref)


@dataclass(frozen=True, slots=True)
class _Known:
    """A history as this process committed it: valid while the row still says this sequence and
    token (history is append-only and gap-free, so nobody appended since)."""

    last_sequence: int
    token: int
    history: tuple[HistoryEvent, ...]


@dataclass(slots=True)
class _Writes:
    """What a group of decisions writes, gathered so each table takes one statement."""

    history: list[tuple[str, int, str, str]] = field(default_factory=list)
    created: list[tuple[str, str, str, int, str, datetime | None]] = field(default_factory=list)
    restarted: list[tuple[str, str, str, int, str, datetime | None]] = field(default_factory=list)
    updated: list[tuple[str, str, int]] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    #: Activities abandoned (workflow id, sequence, run id, handler, reason): `activity_cancels`.
    cancels: list[tuple[str, int, str, str, str]] = field(default_factory=list)
    staged: list[Staged | Encoded] = field(default_factory=list)
    #: The workflow each staged row belongs to: its outbox shard (`OutboxRelay.first_topics`).
    staged_by: list[str] = field(default_factory=list)
    known: dict[str, tuple[int, tuple[HistoryEvent, ...]] | None] = field(default_factory=dict)


class Decisions:
    """Runs decision transactions for one orchestrator."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        workflow_code: WorkflowCode,
        outbound: Outbound,
        metrics: OrchestratorMetrics,
        shards: int,
        crash_window: float = 0.0,
        payload_threshold: int = DEFAULT_THRESHOLD,
        activity_payloads_schema: str = "claimer",
        history_cache_size: int = HISTORY_CACHE_SIZE,
    ) -> None:
        self._pool = pool
        self._activity_payloads_schema = activity_payloads_schema
        self._shards = shards
        self._payload_threshold = payload_threshold
        self._schema = schema
        self._workflow_code = workflow_code
        self._outbound = outbound
        self._metrics = metrics
        self._crash_window = crash_window
        self._cache_size = history_cache_size
        self._known: OrderedDict[str, _Known] = OrderedDict()
        #: History reads saved by the cache, and made (tests and the benchmark read them).
        self.cache_hits = 0
        self.cache_misses = 0
        self._sql = {
            name: sql(statement, schema)
            for name, statement in {
                "lease": LEASE_CHECK,
                "rows": LOCK_ROWS,
                "inputs": compose(LOCK_INPUTS, claimer=quote_ident(activity_payloads_schema)),
                "inputs_alone": LOCK_INPUTS_ALONE,
                "history": HISTORY,
                "append": APPEND,
                "create": CREATE_ROWS,
                "update": UPDATE_ROWS,
                "restart": RESTART_ROWS,
                "drop": DROP_INPUTS,
                "forget": FORGET_SEEN,
                "origins": ORIGINS,
                "cancels": RECORD_ACTIVITY_CANCELS,
            }.items()
        }
        self._claimer_runs = sql(CLAIMER_RUNS, activity_payloads_schema)
        self._claimer_table = f"{quote_ident(activity_payloads_schema)}.runs"
        #: Whether the claimer's runs table exists (`CLAIMER_READY`), checked until it does.
        self._claimer_ready = False

    async def decide(self, workflow_id: str, *, shard: int, token: int, redecide: bool = False) -> Outcome:
        """One decision for ``workflow_id`` under ``shard``'s lease ``token``.

        Raises:
            LeaseLost: the lease moved to another orchestrator; nothing was written.
        """
        return (await self.decide_many([workflow_id], shard=shard, token=token, redecide=redecide))[0]

    async def decide_many(
        self, workflow_ids: Sequence[str], *, shard: int, token: int, redecide: bool = False
    ) -> list[Outcome]:
        """Decisions for several workflows of one shard in one transaction: one lease check, one
        statement per table for the whole group, one commit. Each decision is still whole, and
        all of them commit or none does. The caller decides them one by one when this raises
        anything but LeaseLost.

        Raises:
            LeaseLost: the lease moved to another orchestrator; nothing was written.
        """
        began = time.perf_counter()
        ids = list(dict.fromkeys(workflow_ids))
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                lease = await conn.fetchrow(self._sql["lease"], shard)
                current = lease["fence_token"] if lease is not None else None
                if lease is None or current != token:
                    raise LeaseLost(shard, token, current)
                now: datetime = lease["now"]
                writes = _Writes()
                by_id = await self._decide_in(
                    conn, ids, shard=shard, token=token, redecide=redecide, now=now, writes=writes
                )
                await self._write(conn, writes, shard=shard, token=token, now=now)
                if self._crash_window and any(o.step is not None for o in by_id.values()):
                    await asyncio.sleep(self._crash_window)
        except BaseException:
            # What this transaction appended never happened: nothing of it may be remembered.
            for workflow_id in ids:
                self._known.pop(workflow_id, None)
            raise
        self._remember(writes, token)
        elapsed = time.perf_counter() - began
        for _ in ids:
            self._metrics.decision_seconds.observe(elapsed / max(1, len(ids)))
        return [by_id[w] for w in workflow_ids]

    def _remember(self, writes: _Writes, token: int) -> None:
        for workflow_id, entry in writes.known.items():
            if entry is None:
                self._known.pop(workflow_id, None)
                continue
            last, history = entry
            self._known[workflow_id] = _Known(last, token, history)
            self._known.move_to_end(workflow_id)
        while len(self._known) > self._cache_size:
            self._known.popitem(last=False)

    async def _decide_in(
        self,
        conn: Conn,
        ids: list[str],
        *,
        shard: int,
        token: int,
        redecide: bool,
        now: datetime,
        writes: _Writes,
    ) -> dict[str, Outcome]:
        statements = self._sql
        found = {r["workflow_id"]: r for r in await conn.fetch(statements["rows"], ids)}
        waiting: dict[str, list[Input]] = {}
        clock = now
        records: dict[str, RunRecord] = {}
        unbacked: list[Input] = []
        if not self._claimer_ready:
            self._claimer_ready = bool(await conn.fetchval(CLAIMER_READY, self._claimer_table))
        lock_inputs = statements["inputs"] if self._claimer_ready else statements["inputs_alone"]
        #: Per workflow, each input's (envelope id, type, traceparent): what its decision links to.
        traces: dict[str, list[tuple[str, str, str]]] = {}
        for r in await conn.fetch(lock_inputs, ids):
            waiting_input = _input(r["seq"], r["envelope"])
            waiting.setdefault(r["workflow_id"], []).append(waiting_input)
            if r["trace_parent"] is not None:
                traces.setdefault(r["workflow_id"], []).append(
                    (waiting_input.envelope.id, r["type"], r["trace_parent"])
                )
            clock = max(clock, r["seen_at"])
            if r["run_id"] is not None:
                records[r["run_id"]] = _run_record(r)
            elif r["backed"] is None and r["type"] in _RUN_OUTCOME_TYPES:
                # Recorded before the intake kept its run id, or the claimer's table not joined.
                unbacked.append(waiting_input)
        if unbacked:
            records.update(await self._records(conn, unbacked))
        await self._resolve_results(conn, records, waiting)
        outcomes = {w: Outcome(None, 0) for w in ids}
        todo = [w for w in ids if waiting.get(w) or redecide]
        if not todo:
            return outcomes
        store = _InTransaction(conn, self._schema)
        histories: dict[str, Sequence[HistoryEvent]] = {}
        missing: list[str] = []
        for workflow_id in todo:
            stored_row = found.get(workflow_id)
            if stored_row is None:
                histories[workflow_id] = ()
                continue
            known = self._known.get(workflow_id)
            if (
                known is not None
                and known.last_sequence == stored_row["last_sequence"]
                and known.token == stored_row["decided_with_token"]
            ):
                self.cache_hits += 1
                histories[workflow_id] = known.history
            else:
                self.cache_misses += 1
                missing.append(workflow_id)
        if missing:
            stored: dict[str, list[HistoryEvent]] = {w: [] for w in missing}
            for r in await conn.fetch(statements["history"], missing):
                stored[r["workflow_id"]].append(_event(r["type"], r["data"]))
            for workflow_id, events in stored.items():
                # The code sees every value; the table and the topic hold large ones by reference.
                histories[workflow_id] = await resolve_payloads(events, store)
        for workflow_id in todo:
            record = found.get(workflow_id)
            inputs = waiting.get(workflow_id, [])
            began = time.time_ns()
            out = step(
                workflow_id,
                Row(record["workflow_type"], record["status"], record["execution_deadline"])
                if record is not None
                else None,
                histories[workflow_id],
                inputs,
                workflow_code=self._workflow_code,
                now=now,
                redecide=redecide,
                records=records,
                clock=clock,
            )
            with _decision_span(
                out, record, inputs=len(inputs), shard=shard, began=began, traces=traces.get(workflow_id, ())
            ):
                await self._gather(
                    conn,
                    store,
                    out,
                    record is not None,
                    inputs,
                    now=now,
                    writes=writes,
                    history=histories[workflow_id],
                )
            outcomes[workflow_id] = Outcome(out, len(inputs))
        return outcomes

    async def _records(self, conn: Conn, inputs: Sequence[Input]) -> dict[str, RunRecord]:
        """The claimer's records of the runs the activity outcomes among ``inputs`` name, read
        apart (`CLAIMER_RUNS`): for inputs recorded before the intake kept the run id. Only an
        outcome naming its own `{workflow_id}/{sequence}` can be backed, so only those are read."""
        run_ids = {run_id for i in inputs if (run_id := backed_run_id(i.message)) is not None}
        if not run_ids:
            return {}
        rows = await conn.fetch(self._claimer_runs, sorted(run_ids))
        return {row["run_id"]: _run_record(row) for row in rows}

    async def _resolve_results(
        self, conn: Conn, records: dict[str, RunRecord], waiting: dict[str, list[Input]]
    ) -> None:
        """A completed run's result the claimer stored by reference, read back from the claimer's
        payload table (same database) when an outcome matches its record: the code sees the value,
        and offloading puts it in this schema's table in this decision's transaction, so the
        history never points into another service's table.

        Raises:
            PayloadNotFound: the claimer's table has nothing under the reference.
        """
        for run_id, record in list(records.items()):
            if not is_payload_ref(record.result):
                continue
            matched = any(
                isinstance(i.message, RunCompleted)
                and i.message.run_id == run_id
                and (i.message.fence_token, i.message.attempt) == (record.fence_token, record.attempt)
                for inputs in waiting.values()
                for i in inputs
            )
            if matched:
                data = await get_payload(
                    conn, schema=self._activity_payloads_schema, ref=record.result[PAYLOAD_REF_KEY]
                )
                records[run_id] = replace(record, result=json.loads(data))

    async def _gather(
        self,
        conn: Conn,
        store: _InTransaction,
        out: Step,
        exists: bool,
        inputs: list[Input],
        *,
        now: datetime,
        writes: _Writes,
        history: Sequence[HistoryEvent],
    ) -> None:
        """Add one decision's rows to the group's writes."""
        workflow_id = out.workflow_id
        stored = await offload_payloads(out.events, store, threshold=self._payload_threshold)
        texts = [e.model_dump_json() for e in stored]
        writes.history.extend(
            (workflow_id, e.sequence, e.message_type, text) for e, text in zip(stored, texts, strict=True)
        )
        last = out.events[-1].sequence if out.events else None
        if out.started is not None and last is not None:
            deadline = now + out.started.execution_timeout if out.started.execution_timeout else None
            # The newest run a StartWorkflow began (one step may end a run and start the next).
            start = [e for e in out.events if isinstance(e, WorkflowStarted) and e.continued_from is None][-1]
            row = (
                workflow_id,
                out.started.workflow_type,
                out.status or "running",
                last,
                start.command_id,
                deadline,
            )
            (writes.restarted if exists else writes.created).append(row)
        elif exists and last is not None:
            writes.updated.append((workflow_id, out.status or "running", last))
        writes.dropped.extend(i.seq for i in inputs)
        if out.refused:
            out.refused[:] = await self._with_origins(conn, out.refused)
            writes.forgotten.extend(self._seen_id(refusal) for refusal in out.refused)
        if out.notices:
            await self._notify_parents(conn, out, now)
        writes.cancels.extend(
            (workflow_id, sequence, activity.run_id, activity.activity, reason[:1000])
            for sequence, (activity, reason) in out.activity_cancels.items()
        )
        rows = self._outbound.rows(out, stored, now=now, stored_json=texts)
        writes.staged.extend(_traced(rows) if tracing.enabled() else rows)
        writes.staged_by.extend([workflow_id] * len(rows))
        if last is not None:
            closed = out.status in ("completed", "failed", "cancelled")
            # A closed workflow is decided again only for late inputs: not worth its memory.
            writes.known[workflow_id] = None if closed else (last, (*history, *out.events))

    async def _write(self, conn: Conn, writes: _Writes, *, shard: int, token: int, now: datetime) -> None:
        statements = self._sql
        if writes.history:
            w, s, t, d = zip(*writes.history, strict=True)
            await conn.execute(statements["append"], list(w), list(s), list(t), list(d), token)
        if writes.created:
            w, t, st, last, c, dl = zip(*writes.created, strict=True)
            await conn.execute(
                statements["create"],
                list(w),
                shard,
                list(t),
                list(st),
                list(last),
                list(c),
                now,
                token,
                list(dl),
            )
        if writes.updated:
            w, st, last = zip(*writes.updated, strict=True)
            await conn.execute(statements["update"], list(w), list(st), list(last), token, now)
        if writes.restarted:
            w, t, st, last, c, dl = zip(*writes.restarted, strict=True)
            await conn.execute(
                statements["restart"], list(w), now, token, list(t), list(st), list(last), list(c), list(dl)
            )
        if writes.dropped:
            await conn.execute(statements["drop"], writes.dropped)
        if writes.forgotten:
            await conn.execute(statements["forget"], writes.forgotten)
        if writes.cancels:
            w, q, r, h, why = zip(*writes.cancels, strict=True)
            await conn.execute(statements["cancels"], list(w), list(q), list(r), list(h), list(why))
        if writes.staged:
            await append_encoded(
                conn,
                schema=self._schema,
                rows=[r if isinstance(r, Encoded) else encoded(r) for r in writes.staged],
                # A decision's rows share its workflow's outbox shard, so they leave in staging
                # order, its history first (`OutboxRelay.first_topics`).
                shard_keys=writes.staged_by,
            )

    async def _with_origins(self, conn: Conn, refused: Sequence[Refusal]) -> list[Refusal]:
        """The refused inputs with the records they were consumed from (`intake.RECORD_CONSUMED`):
        their stored value is the record's, byte-exact."""
        rows = await conn.fetch(self._sql["origins"], [r.input.seq for r in refused])
        found = {row["seq"]: row for row in rows}
        out = []
        for refusal in refused:
            row = found.get(refusal.input.seq)
            if row is None:  # recorded before the origin was kept (Outbound.dead_letter)
                out.append(refusal)
                continue
            headers = json.loads(row["origin_headers"]) if row["origin_headers"] is not None else []
            origin = Record(
                topic=row["origin_topic"],
                partition=row["origin_partition"],
                offset=row["origin_offset"],
                key=row["origin_key"],
                value=refusal.input.raw,
                headers=tuple((str(k), base64.b64decode(v)) for k, v in headers),
                timestamp_ms=row["origin_timestamp_ms"],
            )
            out.append(replace(refusal, input=replace(refusal.input, origin=origin)))
        return out

    def _seen_id(self, refusal: Refusal) -> str:
        """The inbox id the intake recorded for a refused input (`intake.inbox_id`)."""
        waiting = refusal.input
        origin = waiting.origin
        if origin is None:  # recorded before its origin was kept: the id had no digest then
            return f"{self._outbound.consumed_topic(waiting.message)}:{waiting.envelope.id}"
        return inbox_id(origin.topic, waiting.envelope.id, origin.value or b"", outcome=True)

    async def _notify_parents(self, conn: Conn, out: Step, now: datetime) -> None:
        # Staged as the parent's input in this transaction: the child's end and its report to the
        # parent commit together. The id is the child's end, so it can only ever be written once.
        last = out.events[-1].sequence if out.events else 0
        envelopes = [
            wrap(
                notice.outcome,
                id=f"{out.workflow_id}#{notice.end_sequence or last}/parent",
                key=notice.parent_workflow_id,
                source="orchestrator",
                occurred_at=now,
            )
            for notice in out.notices
        ]
        await conn.execute(
            sql(RECORD_INPUTS, self._schema),
            [n.parent_workflow_id for n in out.notices],
            [shard_of(n.parent_workflow_id, self._shards) for n in out.notices],
            [e.type for e in envelopes],
            [encode(e) for e in envelopes],
        )


@contextlib.contextmanager
def _decision_span(
    out: Step,
    record: Any,
    *,
    inputs: int,
    shard: int,
    began: int,
    traces: Sequence[tuple[str, str, str]] = (),
) -> Iterator[None]:
    """A decision's span (tracing on), in its workflow run's trace: below the run's root span,
    which the decision that starts the run records (`slotflow.tracing.workflow_started`).

    ``traces`` are the inputs it takes, each (envelope id, type, traceparent of the record it came
    from): the decision links to each (the command, the activity's RunCompleted, the TimerFired
    that caused it), and the root span to the StartWorkflow that started the run."""
    if not tracing.enabled():
        yield
        return
    links = {
        envelope_id: tracing.link(
            context, {"slotflow.message.id": envelope_id, "slotflow.message.type": type_}
        )
        for envelope_id, type_, parent in traces
        if (context := tracing.from_traceparent(parent)) is not None
    }
    workflow_id = out.workflow_id
    started = [e for e in out.events if isinstance(e, WorkflowStarted) and e.continued_from is None]
    workflow_type = (
        out.started.workflow_type
        if out.started is not None
        else (record["workflow_type"] if record is not None else "unknown")
    )
    attributes = {"slotflow.workflow_id": workflow_id, "slotflow.workflow.type": workflow_type}
    command_id: str | None = record["start_command_id"] if record is not None else None
    if started:
        command_id = started[-1].command_id
        tracing.workflow_started(
            TRACE_SCOPE,
            f"workflow {workflow_type}",
            workflow_id,
            command_id,
            attributes=attributes,
            start_time=began,
            links=[links[command_id]] if command_id in links else (),
        )
    parent = tracing.workflow_context(workflow_id, command_id) if command_id is not None else None
    with tracing.span(
        TRACE_SCOPE,
        f"decide {workflow_type}",
        parent=parent,
        links=links.values(),
        start_time=began,
        attributes={
            **attributes,
            "slotflow.workflow.status": out.status or "running",
            "slotflow.workflow.inputs": inputs,
            "slotflow.workflow.appended": len(out.events),
            "slotflow.shard": shard,
        },
    ):
        yield


def _traced(rows: list[Staged | Encoded]) -> list[Staged | Encoded]:
    """The decision's records in its trace; each activity's JobDue under a span of its own."""
    result: list[Staged | Encoded] = []
    for row in rows:
        if isinstance(row, Encoded):
            result.append(with_headers(row, tracing.headers_for()))
            continue
        envelope = row.envelope
        if envelope.type != JobDue.message_type:
            result.append(traced(row))
            continue
        data = envelope.data
        created = tracing.produced(
            TRACE_SCOPE,
            row.topic,
            message_id=envelope.id,
            key=envelope.key,
            attributes=tracing.run_attributes(
                run_id=str(data.get("run_id")),
                job_id=str(data.get("job_id")),
                attempt=int(data.get("attempt", 1)),
                kind=str(data.get("kind")),
                handler=str(data.get("handler")),
                workflow_id=data.get("workflow_id"),
            ),
        )
        result.append(traced(row, created))
    return result


def _event(type_: str, data: str) -> HistoryEvent:
    model = REGISTRY.model_for(type_, 1)
    # The history this orchestrator appended: accepted when it was built (and a history kept from
    # before the acceptance rule replays as it was recorded).
    event = model.model_validate_json(data, context=STORED)
    if not isinstance(event, HistoryEvent):
        raise StoredHistoryCorrupt(f"stored history row of type {type_} is not a history event")
    return event


class StoredHistoryCorrupt(SlotflowError):
    """A stored history row does not decode as a history event (a defect, never user input)."""


#: The input types whose run the claimer's record backs.
#: Inputs read with the claimer's record of a run: activity outcomes, and retries of a parked
#: activity (the run must be dead-lettered, and its redrive number is the next one's base).
_RUN_OUTCOME_TYPES = frozenset(
    (
        RunCompleted.message_type,
        RunDeadLettered.message_type,
        RetryActivity.message_type,
        RedriveRequested.message_type,
    )
)


def _run_record(row: Any) -> RunRecord:
    """The claimer's record of a run as `LOCK_INPUTS` or `CLAIMER_RUNS` read it."""
    return RunRecord(
        run_id=row["run_id"],
        state=row["state"],
        fence_token=row["fence_token"],
        attempt=row["attempt"],
        handler=row["handler"],
        redrive_count=row["redrive_count"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        error=json.loads(row["error"]) if row["error"] is not None else None,
    )


def _input(seq: int, raw: bytes) -> Input:
    envelope = decode(raw)
    # Admitted by the intake after the shared decode accepted it (`decode_record`).
    return Input(seq, envelope, INPUT_MESSAGES.parse(envelope, stored=True), raw=raw)


def history_of(rows: Sequence[tuple[str, str]]) -> list[HistoryEvent]:
    """Stored (type, data) rows as events (tests and tools read the table with it)."""
    return [_event(t, d) for t, d in rows]
