"""The workflow-history topic into the read model: typed events kept per sequence, state re-derived.

Each typed event lands in `workflow_events`; after the batch, every workflow it touched is folded
again from all its events (`slotflow.history.fold`) and its row rewritten. Folding the whole history
costs one indexed read per touched workflow and batch, and buys what matters here: the row is a
function of the history alone, so duplicates, redeliveries and rebuilds cannot make it differ.
"""

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from slotflow.contracts import REGISTRY, Envelope, HistoryEvent
from slotflow.contracts.acceptance import STORED
from slotflow.history import Recorded, WorkflowState, fold
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


# One row per (workflow, sequence) (primary key): the first event at a sequence stays, so the
# fold reads one history however often, and in whatever batches, its events arrive.
_INSERT_EVENT = (
    "INSERT INTO {schema}.workflow_events (workflow_id, sequence, event_id, type, version, at, data) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT DO NOTHING"
)


async def record_event(conn: Conn, schema: str, envelope: Envelope, event: HistoryEvent) -> None:
    """Keep ``event`` at its sequence; an event already there (a conflicting re-append) wins."""
    await conn.execute(
        sql(_INSERT_EVENT, schema),
        event.workflow_id,
        event.sequence,
        envelope.id,
        envelope.type,
        envelope.version,
        envelope.occurred_at,
        _json(event.model_dump(mode="json")),
    )


# Every recorded event of the workflows, in sequence order: the fold's whole input.
_EVENTS_OF = (
    "SELECT workflow_id, type, version, at, data FROM {schema}.workflow_events "
    "WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, sequence"
)


async def refold(conn: Conn, schema: str, workflow_ids: Iterable[str]) -> None:
    """Derive and store the state of each workflow from all of its recorded history events."""
    ids = sorted(set(workflow_ids))
    if not ids:
        return
    rows = await conn.fetch(
        sql(_EVENTS_OF, schema),
        ids,
    )
    histories: dict[str, list[Recorded]] = {}
    for row in rows:
        data = row["data"]
        model = REGISTRY.model_for(row["type"], row["version"])
        # Stored by the projection after its record was accepted at decode.
        event = model.model_validate(json.loads(data) if isinstance(data, str) else data, context=STORED)
        if isinstance(event, HistoryEvent):
            histories.setdefault(row["workflow_id"], []).append(Recorded(event, row["at"]))
    for workflow_id, events in histories.items():
        state = fold(events)
        if state is not None:
            await _store(conn, schema, workflow_id, state)


# The history speaks for the workflow's type and input; a StartWorkflow command (another
# topic, projected in any order) only fills blanks, so both orders give the same row. A row with
# history was not rejected (a refusal of a later duplicate start is not the workflow's).
_STORE_STATE = """
INSERT INTO {schema}.workflows AS w (workflow_id, workflow_type, input, status, cancel_requested,
    cancel_reason, requested_at, updated_at, current_step, last_sequence, started_at, ended_at, derived,
    waiting_for, waiting_since)
VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10, $7, $11, $12::jsonb, $13, $14)
ON CONFLICT (workflow_id) DO UPDATE SET
    rejection = NULL,
    waiting_for = EXCLUDED.waiting_for,
    waiting_since = EXCLUDED.waiting_since,
    workflow_type = COALESCE(EXCLUDED.workflow_type, w.workflow_type),
    input = COALESCE(EXCLUDED.input, w.input),
    status = EXCLUDED.status,
    cancel_requested = w.cancel_requested OR EXCLUDED.cancel_requested,
    cancel_reason = COALESCE(w.cancel_reason, EXCLUDED.cancel_reason),
    requested_at = LEAST(w.requested_at, EXCLUDED.requested_at),
    updated_at = GREATEST(w.updated_at, EXCLUDED.updated_at),
    current_step = EXCLUDED.current_step,
    last_sequence = EXCLUDED.last_sequence,
    started_at = EXCLUDED.started_at,
    ended_at = EXCLUDED.ended_at,
    derived = EXCLUDED.derived
"""


async def _store(conn: Conn, schema: str, workflow_id: str, state: WorkflowState) -> None:
    await conn.execute(
        sql(_STORE_STATE, schema),
        workflow_id,
        state.workflow_type,
        _json(state.input) if state.input is not None else None,
        state.status,
        state.cancel_requested,
        state.cancel_reason,
        state.started_at,
        state.updated_at,
        state.current_step,
        state.last_sequence,
        state.ended_at,
        _json(state.derived()),
        *_waiting(state),
    )


def _waiting(state: WorkflowState) -> tuple[str | None, datetime | None]:
    """`waiting_for` and `waiting_since`: `signal approve` (or `signal`, an untimed wait) and since
    when, while only a signal can move the workflow."""
    waiting = state.waiting
    if waiting is None:
        return None, None
    name = waiting.get("signal")
    return (f"signal {name}" if name else "signal"), datetime.fromisoformat(waiting["since"])
