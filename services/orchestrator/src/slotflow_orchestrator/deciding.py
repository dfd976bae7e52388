"""The decision transaction: one workflow, one PostgreSQL transaction, nothing half-applied.

In one transaction, under the shard's lease:

1. check the lease still carries this orchestrator's fencing token (FOR SHARE: an acquisition by
   another orchestrator waits for this transaction, and every later one of ours is refused);
2. lock the workflow's row and its waiting inputs;
3. read its history, step it (`stepping.step`, pure) with the database clock's `now()`;
4. append the new history rows, update the row, delete the applied inputs, and stage every
   outward record (history, JobDue, StartTimer/CancelTimer, child starts, acknowledgements) in the
   outbox.

A crash before the commit leaves the inputs waiting and nothing staged; after it, the outbox
relay publishes what was staged. So no decision is lost and none is made twice.
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from slotflow.contracts import REGISTRY, HistoryEvent, WorkflowStarted, wrap
from slotflow.contracts.codec import decode, encode
from slotflow.errors import SlotflowError
from slotflow.pg.outbox import append_many
from slotflow.pg.payloads import get_payload, put_payload
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import sql
from slotflow.workflow.payloads import DEFAULT_THRESHOLD, offload_payloads, resolve_payloads
from slotflow_orchestrator.inputs import INPUT_MESSAGES
from slotflow_orchestrator.intake import RECORD_INPUTS, shard_of
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.stepping import Decider, Input, Row, Step, step

log = logging.getLogger(__name__)


class LeaseLost(SlotflowError):
    """Another orchestrator took the shard's lease (a higher fencing token): this one must stop
    deciding for it. Nothing of the refused decision was written."""

    def __init__(self, shard: int, token: int, current: int | None) -> None:
        super().__init__(f"lease of shard {shard} moved on (ours {token}, now {current})")
        self.shard = shard


# The fence: the lease row read under FOR SHARE, so an acquisition (an UPDATE raising the token)
# waits for decisions in flight and no decision of the old token can commit after it.
LEASE_CHECK = "SELECT fence_token FROM {schema}.shard_leases WHERE shard = $1 FOR SHARE"
LOCK_ROW = (
    "SELECT workflow_type, status, execution_deadline, last_sequence FROM {schema}.workflows "
    "WHERE workflow_id = $1 FOR UPDATE"
)
# Applied in arrival order; locked so a concurrent pass over the same workflow waits.
LOCK_INPUTS = "SELECT seq, envelope FROM {schema}.inputs WHERE workflow_id = $1 ORDER BY seq FOR UPDATE"
HISTORY = "SELECT type, data FROM {schema}.history WHERE workflow_id = $1 ORDER BY sequence"
# (workflow_id, sequence) is the primary key: a second event at a taken sequence fails the whole
# decision instead of forking the history.
APPEND = (
    "INSERT INTO {schema}.history (workflow_id, sequence, type, data, fence_token) "
    "SELECT $1, s, t, d::json, $5 FROM unnest($2::int[], $3::text[], $4::text[]) AS u(s, t, d)"
)
CREATE_ROW = """
INSERT INTO {schema}.workflows (workflow_id, shard, workflow_type, status, last_sequence,
    start_command_id, started_at, execution_deadline, decided_with_token)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""
UPDATE_ROW = """
UPDATE {schema}.workflows SET status = $2, last_sequence = $3, decided_with_token = $4,
    closed_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN $5 ELSE closed_at END
WHERE workflow_id = $1
"""
DROP_INPUTS = "DELETE FROM {schema}.inputs WHERE seq = ANY($1::bigint[])"


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


class Decisions:
    """Runs decision transactions for one orchestrator."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        decider: Decider,
        outbound: Outbound,
        metrics: OrchestratorMetrics,
        shards: int,
        crash_window: float = 0.0,
        payload_threshold: int = DEFAULT_THRESHOLD,
    ) -> None:
        self._pool = pool
        self._shards = shards
        self._payload_threshold = payload_threshold
        self._schema = schema
        self._decider = decider
        self._outbound = outbound
        self._metrics = metrics
        self._crash_window = crash_window
        self._sql = {
            name: sql(statement, schema)
            for name, statement in {
                "lease": LEASE_CHECK,
                "row": LOCK_ROW,
                "inputs": LOCK_INPUTS,
                "history": HISTORY,
                "append": APPEND,
                "create": CREATE_ROW,
                "update": UPDATE_ROW,
                "drop": DROP_INPUTS,
            }.items()
        }

    async def decide(self, workflow_id: str, *, shard: int, token: int, redecide: bool = False) -> Outcome:
        """One decision for ``workflow_id`` under ``shard``'s lease ``token``.

        Raises:
            LeaseLost: the lease moved to another orchestrator; nothing was written.
        """
        began = time.perf_counter()
        async with self._pool.acquire() as conn, conn.transaction():
            current = await conn.fetchval(self._sql["lease"], shard)
            if current != token:
                raise LeaseLost(shard, token, current)
            outcome = await self._decide_in(conn, workflow_id, shard=shard, token=token, redecide=redecide)
            if self._crash_window and outcome.step is not None:
                await asyncio.sleep(self._crash_window)
        self._metrics.decision_seconds.observe(time.perf_counter() - began)
        return outcome

    async def decide_many(
        self, workflow_ids: Sequence[str], *, shard: int, token: int, redecide: bool = False
    ) -> list[Outcome]:
        """Decisions for several workflows of one shard in one transaction (one lease check, one
        commit): each decision is still whole, and all of them commit or none does. The caller
        decides them one by one when this raises anything but LeaseLost.

        Raises:
            LeaseLost: the lease moved to another orchestrator; nothing was written.
        """
        began = time.perf_counter()
        async with self._pool.acquire() as conn, conn.transaction():
            current = await conn.fetchval(self._sql["lease"], shard)
            if current != token:
                raise LeaseLost(shard, token, current)
            outcomes = [
                await self._decide_in(conn, workflow_id, shard=shard, token=token, redecide=redecide)
                for workflow_id in workflow_ids
            ]
            if self._crash_window and any(o.step is not None for o in outcomes):
                await asyncio.sleep(self._crash_window)
        elapsed = time.perf_counter() - began
        for _ in workflow_ids:
            self._metrics.decision_seconds.observe(elapsed / max(1, len(workflow_ids)))
        return outcomes

    async def _decide_in(
        self, conn: Conn, workflow_id: str, *, shard: int, token: int, redecide: bool
    ) -> Outcome:
        sql = self._sql
        found = await conn.fetchrow(sql["row"], workflow_id)
        raw_inputs = await conn.fetch(sql["inputs"], workflow_id)
        if not raw_inputs and not redecide:
            return Outcome(None, 0)
        row = (
            Row(found["workflow_type"], found["status"], found["execution_deadline"])
            if found is not None
            else None
        )
        store = _InTransaction(conn, self._schema)
        # The code sees every value; the table and the topic hold large ones by reference.
        history = (
            await resolve_payloads(await self._history(conn, workflow_id), store) if found is not None else []
        )
        inputs = [_input(r["seq"], r["envelope"]) for r in raw_inputs]
        now: datetime = await conn.fetchval("SELECT now()")
        out = step(workflow_id, row, history, inputs, decider=self._decider, now=now, redecide=redecide)
        stored = await offload_payloads(out.events, store, threshold=self._payload_threshold)
        if stored:
            await conn.execute(
                sql["append"],
                workflow_id,
                [e.sequence for e in stored],
                [e.message_type for e in stored],
                [e.model_dump_json() for e in stored],
                token,
            )
        last = out.events[-1].sequence if out.events else None
        if out.started is not None and last is not None:
            deadline = now + out.started.execution_timeout if out.started.execution_timeout else None
            await conn.execute(
                sql["create"],
                workflow_id,
                shard,
                out.started.workflow_type,
                out.status,
                last,
                first.command_id if isinstance(first := out.events[0], WorkflowStarted) else "",
                now,
                deadline,
                token,
            )
        elif found is not None and last is not None:
            await conn.execute(sql["update"], workflow_id, out.status, last, token, now)
        if raw_inputs:
            await conn.execute(sql["drop"], [r["seq"] for r in raw_inputs])
        if out.notices:
            await self._notify_parents(conn, out, now)
        staged = self._outbound.rows(out, stored, now=now)
        if staged:
            await append_many(conn, schema=self._schema, items=staged)
        return Outcome(out, len(raw_inputs))

    async def _notify_parents(self, conn: Conn, out: Step, now: datetime) -> None:
        # Staged as the parent's input in this transaction: the child's end and its report to the
        # parent commit together. The id is the child's end, so it can only ever be written once.
        last = out.events[-1].sequence if out.events else 0
        envelopes = [
            wrap(
                notice.outcome,
                id=f"{out.workflow_id}#{last}/parent",
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

    async def _history(self, conn: Conn, workflow_id: str) -> list[HistoryEvent]:
        rows = await conn.fetch(self._sql["history"], workflow_id)
        return [_event(r["type"], r["data"]) for r in rows]


def _event(type_: str, data: str) -> HistoryEvent:
    model = REGISTRY.model_for(type_, 1)
    event = model.model_validate_json(data)
    if not isinstance(event, HistoryEvent):
        raise StoredHistoryCorrupt(f"stored history row of type {type_} is not a history event")
    return event


class StoredHistoryCorrupt(SlotflowError):
    """A stored history row does not decode as a history event (a defect, never user input)."""


def _input(seq: int, raw: bytes) -> Input:
    envelope = decode(raw)
    return Input(seq, envelope, INPUT_MESSAGES.parse(envelope))


def history_of(rows: Sequence[tuple[str, str]]) -> list[HistoryEvent]:
    """Stored (type, data) rows as events (tests and tools read the table with it)."""
    return [_event(t, d) for t, d in rows]
