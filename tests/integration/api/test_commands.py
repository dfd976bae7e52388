"""Commands over HTTP: validated, published to the right topic, and read-your-writes on their acks."""

import asyncio
from datetime import UTC, datetime

import httpx

from slotflow.contracts import (
    CommandAccepted,
    CommandRejected,
    ScheduleCreated,
    WorkflowCompleted,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
    WORKFLOW_HISTORY,
)
from slotflow.settings import KafkaSettings
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import cron, eventually_json, read_topic

DEFINITION = {
    "spec": {"kind": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"},
    "handler": "h.x",
}


async def test_every_command_reaches_its_topic_under_its_key(
    client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    calls = [
        ("post", "/v1/schedules", {"schedule_id": "s1", "definition": DEFINITION}),
        ("put", "/v1/schedules/s1", {"definition": DEFINITION}),
        ("post", "/v1/schedules/s1/pause", {"reason": "holiday"}),
        ("post", "/v1/schedules/s1/resume", None),
        ("post", "/v1/schedules/s1/trigger", None),
        (
            "post",
            "/v1/schedules/s1/backfill",
            {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        ),
        ("delete", "/v1/schedules/s1", None),
    ]
    ids = []
    for method, url, body in calls:
        response = await client.request(method, url, json=body)
        assert response.status_code == 202, (url, response.text)
        ids.append(response.json()["command_id"])
    envelopes = await read_topic(kafka, SCHEDULE_COMMANDS, want=len(calls))
    assert [e.id for e in envelopes] == ids
    assert [e.type for e in envelopes] == [
        "schedule.create",
        "schedule.update",
        "schedule.pause",
        "schedule.resume",
        "schedule.trigger",
        "schedule.backfill",
        "schedule.delete",
    ]
    assert {e.key for e in envelopes} == {"s1"}
    assert envelopes[2].data["reason"] == "holiday"

    workflow_calls = [
        ("/v1/workflows", {"workflow_id": "order-7", "workflow_type": "order", "input": {"sku": 1}}),
        ("/v1/workflows/order-7/signal", {"signal": "paid", "payload": {"amount": 5}}),
        ("/v1/workflows/order-7/cancel", {"reason": "customer"}),
        ("/v1/workflows/order-7/terminate", {"reason": "ops"}),
    ]
    for url, body in workflow_calls:
        assert (await client.post(url, json=body)).status_code == 202
    workflow = await read_topic(kafka, WORKFLOW_COMMANDS, want=4)
    assert [(e.type, e.key) for e in workflow] == [
        ("workflow.start", "order-7"),
        ("workflow.signal", "order-7"),
        ("workflow.cancel", "order-7"),
        ("workflow.terminate", "order-7"),
    ]
    assert workflow[3].data["reason"] == "ops"

    redrive = await client.post("/v1/dlq/redrive", json={"selection": {"ids": ["t:0:4"]}})
    discard = await client.post(
        "/v1/dlq/discard", json={"selection": {"reason": "undecodable"}, "reason": "junk"}
    )
    assert redrive.status_code == discard.status_code == 202
    dlq = await read_topic(kafka, DLQ_COMMANDS, want=2)
    # Different keys land on different partitions, which a consumer may read in either order.
    assert sorted((e.type, e.key) for e in dlq) == sorted(
        [("dlq.redrive", "t:0:4"), ("dlq.discard", discard.json()["command_id"])]
    )


async def test_idempotency_key_becomes_the_command_id(
    client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    headers = {"Idempotency-Key": "create-s2-once"}
    body = {"schedule_id": "s2", "definition": DEFINITION}
    first = await client.post("/v1/schedules", json=body, headers=headers)
    second = await client.post("/v1/schedules", json=body, headers=headers)
    assert first.json()["command_id"] == second.json()["command_id"] == "create-s2-once"
    # No claimer runs here: the answer warns that nothing serves the handler yet.
    assert first.json()["warnings"] == second.json()["warnings"] != []
    envelopes = await read_topic(kafka, SCHEDULE_COMMANDS, want=2)
    # Published twice, one id: the ticker's inbox applies it once.
    assert {e.id for e in envelopes} == {"create-s2-once"}


async def test_invalid_bodies_are_422_naming_the_field(client: httpx.AsyncClient) -> None:
    bad_cron = {
        "schedule_id": "s3",
        "definition": {**DEFINITION, "spec": {"kind": "cron", "expression": "61 * * * *"}},
    }
    response = await client.post("/v1/schedules", json=bad_cron)
    assert response.status_code == 422
    assert "invalid cron expression" in response.json()["detail"]
    bad_zone = {
        "schedule_id": "s3",
        "definition": {
            **DEFINITION,
            "spec": {"kind": "cron", "expression": "* * * * *", "timezone": "Mars/Olympus"},
        },
    }
    assert "unknown IANA time zone" in (await client.post("/v1/schedules", json=bad_zone)).json()["detail"]
    bad_id = await client.post("/v1/schedules", json={"schedule_id": "has space", "definition": DEFINITION})
    assert bad_id.status_code == 422
    assert "schedule_id" in bad_id.json()["detail"]
    backwards = await client.post(
        "/v1/schedules/s3/backfill", json={"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}
    )
    assert backwards.status_code == 422
    assert "end must be after start" in backwards.json()["detail"]
    extra = await client.post("/v1/workflows", json={"workflow_id": "w", "workflow_type": "t", "surprise": 1})
    assert extra.status_code == 422
    assert "surprise" in extra.json()["detail"]
    not_json = await client.post("/v1/schedules", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 422
    control = await client.post("/v1/schedules/s3/trigger", headers={"Idempotency-Key": "a\tb"})
    assert control.status_code == 422
    assert "control characters" in control.json()["detail"]


async def test_wait_returns_once_the_ticker_accepts(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    async def ticker() -> None:
        # Plays the ticker: reads the command, stores the schedule, acknowledges (one topic, one key).
        (command,) = await read_topic(kafka, SCHEDULE_COMMANDS, want=1)
        created = ScheduleCreated(
            schedule_id="s4", definition=cron(), paused=False, next_fire_at=datetime.now(UTC)
        )
        await emit(SCHEDULE_EVENTS, created, id=f"{command.id}/created", key="s4")
        accepted = CommandAccepted(command_id=command.id, command_type=command.type, subject="s4")
        await emit(SCHEDULE_EVENTS, accepted, id=f"{command.id}/accepted", key="s4")

    task = asyncio.create_task(ticker())
    response = await client.post(
        "/v1/schedules", params={"wait": 20}, json={"schedule_id": "s4", "definition": DEFINITION}
    )
    await task
    assert response.status_code == 200, response.text
    status = response.json()
    assert status["status"] == "accepted"
    assert status["command_type"] == "schedule.create"
    # Read-your-writes: the schedule the command made is visible once the command is.
    assert (await client.get("/v1/schedules/s4")).status_code == 200
    again = await client.get(f"/v1/commands/{status['command_id']}")
    assert again.json()["status"] == "accepted"


async def test_rejected_command_is_409_with_the_reason(client: httpx.AsyncClient, emit: Emitter) -> None:
    response = await client.post("/v1/schedules/ghost/resume")
    command_id = response.json()["command_id"]
    await eventually_json(client, f"/v1/commands/{command_id}", lambda b: b["status"] == "pending")
    rejected = CommandRejected(
        command_id=command_id,
        command_type="schedule.resume",
        subject="ghost",
        reason="schedule ghost does not exist",
    )
    await emit(SCHEDULE_EVENTS, rejected, id=f"{command_id}/rejected", key="ghost")
    waited = await client.get(f"/v1/commands/{command_id}", params={"wait": 20})
    assert waited.json()["status"] == "rejected"
    assert waited.json()["reason"] == "schedule ghost does not exist"

    retried = await client.post(
        "/v1/schedules/ghost/resume", params={"wait": 20}, headers={"Idempotency-Key": command_id}
    )
    assert retried.status_code == 409
    assert retried.json()["detail"] == "schedule ghost does not exist"


async def test_workflow_commands_wait_for_the_orchestrators_answer(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    body = {"workflow_id": "w-2", "workflow_type": "order", "execution_timeout_seconds": 60}
    response = await client.post("/v1/workflows", json=body)
    command_id = response.json()["command_id"]
    await eventually_json(client, f"/v1/commands/{command_id}", lambda b: b["status"] == "pending")
    accepted = CommandAccepted(command_id=command_id, command_type="workflow.start", subject="w-2")
    await emit(WORKFLOW_EVENTS, accepted, id=f"{command_id}/accepted", key="w-2")
    waited = await client.get(f"/v1/commands/{command_id}", params={"wait": 20})
    assert waited.json()["status"] == "accepted"


async def test_a_dlq_command_waits_for_the_dlq_service(client: httpx.AsyncClient) -> None:
    # The DLQ service acknowledges its commands (issue 24: `published` at once was no answer).
    # No DLQ service runs here, so the wait ends with the command still pending.
    response = await client.post(
        "/v1/dlq/redrive", params={"wait": 2}, json={"selection": {"ids": ["t:0:9"]}}
    )
    assert response.status_code == 202
    assert response.json()["status"] == "pending"
    unknown = await client.get("/v1/commands/never-sent")
    assert unknown.json() == {
        "command_id": "never-sent",
        "status": "unknown",
        "reason": None,
        "command_type": None,
        "subject": None,
        "published_at": None,
        "acknowledged_at": None,
        "principal": None,
        "summary": None,
    }


async def test_signal_cancel_and_terminate_of_a_closed_workflow_are_409_and_publish_nothing(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    # Open: the commands go through, as before.
    started = WorkflowStarted(
        workflow_id="order-open", sequence=1, workflow_type="order", command_id="c-open"
    )
    await emit(WORKFLOW_HISTORY, started, id=history_event_id("order-open", 1), key="order-open")
    await eventually_json(client, "/v1/workflows/order-open", lambda b: b["status"] == "running")
    assert (
        await client.post("/v1/workflows/order-open/signal", json={"signal": "approve"})
    ).status_code == 202
    # Closed: each is refused now, with the status, instead of a command the orchestrator rejects.
    for sequence, event in enumerate(
        (
            WorkflowStarted(workflow_id="order-done", sequence=1, workflow_type="order", command_id="c-done"),
            WorkflowCompleted(workflow_id="order-done", sequence=2, result={"ok": True}),
        ),
        start=1,
    ):
        await emit(WORKFLOW_HISTORY, event, id=history_event_id("order-done", sequence), key="order-done")
    await eventually_json(client, "/v1/workflows/order-done", lambda b: b["status"] == "completed")
    for verb, body in (("signal", {"signal": "approve"}), ("cancel", {"reason": "x"}), ("terminate", {})):
        refused = await client.post(f"/v1/workflows/order-done/{verb}", json=body)
        assert refused.status_code == 409, (verb, refused.text)
        detail = refused.json()["detail"]
        assert "order-done" in detail
        assert "is completed" in detail
        assert f"a {verb} applies only" in detail
    # A last command after the refused ones: once it is on the topic, so would they be.
    assert (await client.post("/v1/workflows/order-open/signal", json={"signal": "ship"})).status_code == 202
    published = await read_topic(kafka, WORKFLOW_COMMANDS, want=2)
    assert [envelope.key for envelope in published] == ["order-open", "order-open"]


async def test_wait_takes_up_to_five_minutes_and_names_the_limit_past_it(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    # An operator's ?wait=60 was a 422 (the cap was 30 s) and a longer wait was cut at 30 s.
    published = await client.post("/v1/schedules/ghost-2/trigger")
    command_id = published.json()["command_id"]
    await eventually_json(client, f"/v1/commands/{command_id}", lambda b: b["status"] == "pending")

    async def owner_answers_late() -> None:
        await asyncio.sleep(31)
        rejected = CommandRejected(
            command_id=command_id,
            command_type="schedule.trigger",
            subject="ghost-2",
            reason="no such schedule",
        )
        await emit(SCHEDULE_EVENTS, rejected, id=f"{command_id}/rejected", key="ghost-2")

    late = asyncio.create_task(owner_answers_late())
    started = asyncio.get_running_loop().time()
    waited = await client.get(f"/v1/commands/{command_id}", params={"wait": 60}, timeout=90)
    await late
    assert waited.status_code == 200, waited.text
    assert waited.json()["status"] == "rejected"
    assert asyncio.get_running_loop().time() - started > 30
    assert (await client.get(f"/v1/commands/{command_id}", params={"wait": 300})).status_code == 200
    too_long = await client.post("/v1/schedules/ghost-2/trigger", params={"wait": 301})
    assert too_long.status_code == 422
    assert "300" in too_long.json()["detail"]
    assert "wait" in too_long.json()["detail"]
