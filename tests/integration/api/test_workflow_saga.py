"""A saga's typed history on the real history topic, folded into the workflow the API serves.

Two forward steps succeed (each registers its compensation), the third fails, the compensations
run newest first, and the workflow fails compensated. The API's derived state is checked at each
point; re-appended events collapse; an unknown type on the history topic is parked; a rebuild from
the topics gives the same rows.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityScheduled,
    CompensationRegistered,
    HistoryEvent,
    RunStarted,
    WorkflowFailed,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import DLQ_MESSAGES, RUN_EVENTS, WORKFLOW_HISTORY
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_api.config import Settings
from slotflow_api.projector import rebuild
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json, read_model_snapshot, read_topic

W = "order-9001"
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)


def scheduled(seq: int, activity: str, compensates: int | None = None) -> ActivityScheduled:
    return ActivityScheduled(
        workflow_id=W,
        sequence=seq,
        activity=activity,
        run_id=f"{W}/{seq}",
        payload={"order": 9001},
        compensation=compensates is not None,
        compensates=compensates,
    )


def done(seq: int, of: int) -> ActivityCompleted:
    return ActivityCompleted(workflow_id=W, sequence=seq, scheduled_sequence=of, result={"ok": of})


def saga() -> list[HistoryEvent]:
    return [
        WorkflowStarted(
            workflow_id=W, sequence=1, workflow_type="orders.checkout", input={"o": 1}, command_id="s1"
        ),
        scheduled(2, "inventory.reserve"),
        done(3, 2),
        CompensationRegistered(workflow_id=W, sequence=4, for_step=2, activity="inventory.release"),
        scheduled(5, "payments.charge"),
        done(6, 5),
        CompensationRegistered(workflow_id=W, sequence=7, for_step=5, activity="payments.refund"),
        scheduled(8, "shipping.book"),
        ActivityFailed(
            workflow_id=W,
            sequence=9,
            scheduled_sequence=8,
            error_type="NoCarrier",
            message="no carrier",
            permanent=True,
        ),
        scheduled(10, "payments.refund", compensates=5),
        done(11, 10),
        scheduled(12, "inventory.release", compensates=2),
        done(13, 12),
        WorkflowFailed(
            workflow_id=W, sequence=14, error_type="NoCarrier", message="no carrier", compensated=True
        ),
    ]


async def append(emit: Emitter, events: list[HistoryEvent]) -> None:
    for event in events:
        await emit(
            WORKFLOW_HISTORY,
            event,
            id=history_event_id(W, event.sequence),
            key=W,
            occurred_at=T0 + timedelta(seconds=event.sequence),
            source="orchestrator",
        )


def saga_state(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["activity"], c["state"]) for c in body["compensations"]]


async def test_saga_history_is_folded_into_the_workflow(
    app: FastAPI,
    client: httpx.AsyncClient,
    emit: Emitter,
    producer: Producer,
    kafka: KafkaSettings,
    api_settings: Settings,
) -> None:
    events = saga()
    url = f"/v1/workflows/{W}"
    posted = await client.post("/v1/workflows", json={"workflow_id": W, "workflow_type": "orders.checkout"})
    assert posted.status_code == 202

    # Two steps done, each with its compensation registered; the third is running.
    await append(emit, events[:8])
    body = await eventually_json(client, url, lambda b: b["last_sequence"] == 8)
    assert (body["status"], body["current_step"]) == ("running", "shipping.book")
    assert saga_state(body) == [("payments.refund", "registered"), ("inventory.release", "registered")]
    assert [c["for_step"] for c in body["compensations"]] == [5, 2]
    assert [c["step_activity"] for c in body["compensations"]] == ["payments.charge", "inventory.reserve"]
    assert [(a["sequence"], a["handler"], a["state"]) for a in body["pending_activities"]] == [
        (8, "shipping.book", "scheduled")
    ]
    assert [s["state"] for s in body["steps"]] == ["completed", "completed", "scheduled"]
    assert body["workflow_type"] == "orders.checkout"
    assert body["started_at"] is not None
    assert body["ended_at"] is None

    # The third step fails for good: the newest compensation runs first (a claimer holds it).
    await append(emit, events[8:10])
    refund_run = f"{W}/10"
    claimed = RunStarted(
        run_id=refund_run,
        job_id=W,
        slot=T0,
        attempt=1,
        fence_token=1,
        owner="claimer-1",
        workflow_id=W,
        sequence=10,
        started_at=T0 + timedelta(seconds=10),
    )
    await emit(RUN_EVENTS, claimed, id=f"{refund_run}/1/started", key=W)
    body = await eventually_json(
        client,
        url,
        lambda b: b["last_sequence"] == 10 and b["pending_activities"][0]["state"] == "running",
    )
    assert (body["status"], body["current_step"]) == ("compensating", "payments.refund")
    assert saga_state(body) == [("payments.refund", "running"), ("inventory.release", "registered")]
    assert body["pending_activities"][0]["compensates"] == 5
    assert body["steps"][2]["error"] == {"type": "NoCarrier", "message": "no carrier", "permanent": True}

    # Re-appends (same envelope ids) collapse; an unknown history type is parked, not folded.
    await append(emit, events[:10])
    await producer.send_raw(
        kafka.topic(WORKFLOW_HISTORY),
        key=W.encode(),
        value=json.dumps(
            {
                "type": "workflow.mystery",
                "version": 1,
                "id": f"{W}#99",
                "key": W,
                "occurred_at": T0.isoformat(),
                "source": "test",
                "data": {"workflow_id": W, "sequence": 11},
            }
        ).encode(),
    )
    await append(emit, events[10:])
    body = await eventually_json(client, url, lambda b: b["last_sequence"] == 14)
    assert (body["status"], body["current_step"], body["compensated"]) == ("failed", None, True)
    assert saga_state(body) == [("payments.refund", "done"), ("inventory.release", "done")]
    assert body["pending_activities"] == []
    assert body["error"] == {"type": "NoCarrier", "message": "no carrier"}
    assert body["ended_at"] is not None
    assert body["anomalies"] == []
    history = (await client.get(f"{url}/history", params={"origin": "history", "limit": 500})).json()
    assert [e["sequence"] for e in history["items"]] == list(range(1, 15))
    everything = (await client.get(f"{url}/history", params={"limit": 500})).json()["items"]
    assert len(everything) == body["history_length"] == 14 + 1 + 1  # + the command and the run event
    (letter,) = await read_topic(kafka, DLQ_MESSAGES, want=1)
    assert letter.data["reason"] == "unknown_type"
    failed = (await client.get("/v1/workflows", params={"status": "failed"})).json()["items"]
    assert [(w["workflow_id"], w["last_sequence"]) for w in failed] == [(W, 14)]

    # A rebuild from the topics folds the same history into the same rows.
    schema = api_settings.api.db_schema
    pool = await create_pool(PostgresSettings(dsn=api_settings.postgres.dsn), min_size=1, max_size=2)
    try:
        before = await read_model_snapshot(pool, schema)
        assert len(before["workflow_events"]) == 14
        await rebuild(pool, api_settings)

        async def rebuilt() -> bool:
            return await read_model_snapshot(pool, schema) == before

        await assert_eventually(rebuilt, timeout=60, message="the rebuilt read model equals the original")
    finally:
        await pool.close()


async def test_a_parked_step_and_a_reused_id_as_the_api_serves_them(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    """A step parked in the DLQ stays pending, marked with the DLQ reason, until its redrive's
    outcome; a new run of the closed id is what the workflow shows afterwards."""
    first = [
        WorkflowStarted(workflow_id=W, sequence=1, workflow_type="orders.checkout", command_id="s1"),
        scheduled(2, "shipping.book"),
        ActivityParked(
            workflow_id=W,
            sequence=3,
            scheduled_sequence=2,
            reason="attempts_exhausted",
            error_type="CarrierDown",
            message="503",
        ),
    ]
    url = f"/v1/workflows/{W}"
    await append(emit, first)
    body = await eventually_json(client, url, lambda b: b["last_sequence"] == 3)
    assert body["status"] == "running"
    assert [(s["state"], s["error"]) for s in body["steps"]] == [
        ("parked", {"type": "CarrierDown", "message": "503", "dead_letter_reason": "attempts_exhausted"})
    ]
    assert [(a["sequence"], a["handler"]) for a in body["pending_activities"]] == [(2, "shipping.book")]

    # The redrive's outcome completes the step; the run ends; the id is reused for a second run.
    rest = [
        done(4, 2),
        WorkflowFailed(workflow_id=W, sequence=5, error_type="Later", message="later"),
        WorkflowStarted(
            workflow_id=W, sequence=6, workflow_type="orders.checkout", command_id="s2", reused_after=5
        ),
    ]
    await append(emit, rest)
    body = await eventually_json(client, url, lambda b: b["last_sequence"] == 6)
    assert (body["status"], body["error"], body["steps"], body["anomalies"]) == ("running", None, [], [])
