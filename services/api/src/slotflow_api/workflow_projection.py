"""The workflow-history topic into the read model: typed events kept per sequence, state re-derived.

Each typed event lands in `workflow_events`; after the batch, every workflow it touched is folded
again from all its events (`slotflow.history.fold`) and its row rewritten. Folding the whole history
costs one indexed read per touched workflow and batch, and buys what matters here: the row is a
function of the history alone, so duplicates, redeliveries and rebuilds cannot make it differ.
Its statements are in `slotflow_api.sql.projection`.
"""

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import asyncpg

from slotflow.contracts import REGISTRY, Envelope, HistoryEvent
from slotflow.contracts.acceptance import STORED
from slotflow.history import Recorded, WorkflowState, fold
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql
from slotflow_api.sql.projection import INSERT_WORKFLOW_EVENT, STORE_WORKFLOW_STATE, WORKFLOW_EVENTS_OF


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


async def record_event(conn: Conn, schema: str, envelope: Envelope, event: HistoryEvent) -> None:
    """Keep ``event`` at its sequence; an event already there (a conflicting re-append) wins."""
    await conn.execute(
        sql(INSERT_WORKFLOW_EVENT, schema),
        event.workflow_id,
        event.sequence,
        envelope.id,
        envelope.type,
        envelope.version,
        envelope.occurred_at,
        _json(event.model_dump(mode="json")),
    )


def stored_event(row: asyncpg.Record) -> Recorded | None:
    """A `workflow_events` row (`type`, `version`, `at`, `data`) as the history event it keeps."""
    data = row["data"]
    model = REGISTRY.model_for(row["type"], row["version"])
    # Stored by the projection after its record was accepted at decode.
    event = model.model_validate(json.loads(data) if isinstance(data, str) else data, context=STORED)
    return Recorded(event, row["at"]) if isinstance(event, HistoryEvent) else None


async def refold(conn: Conn, schema: str, workflow_ids: Iterable[str]) -> None:
    """Derive and store the state of each workflow from all of its recorded history events."""
    ids = sorted(set(workflow_ids))
    if not ids:
        return
    rows = await conn.fetch(
        sql(WORKFLOW_EVENTS_OF, schema),
        ids,
    )
    histories: dict[str, list[Recorded]] = {}
    for row in rows:
        recorded = stored_event(row)
        if recorded is not None:
            histories.setdefault(row["workflow_id"], []).append(recorded)
    for workflow_id, events in histories.items():
        state = fold(events)
        if state is not None:
            await _store(conn, schema, workflow_id, state)


async def _store(conn: Conn, schema: str, workflow_id: str, state: WorkflowState) -> None:
    await conn.execute(
        sql(STORE_WORKFLOW_STATE, schema),
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
        *waiting_columns(state),
        _json(state.memo),
        _json(state.search_attributes),
    )


def waiting_columns(state: WorkflowState) -> tuple[str | None, datetime | None]:
    """`waiting_for` and `waiting_since`: `signal approve` (or `signal`, an untimed wait) and since
    when, while only a signal can move the workflow."""
    waiting = state.waiting
    if waiting is None:
        return None, None
    name = waiting.get("signal")
    return (f"signal {name}" if name else "signal"), datetime.fromisoformat(waiting["since"])
