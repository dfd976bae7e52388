"""The api's side of a redrive (docs/decisions/0009), on the real broker and database: the statuses
and notes the dlq reports, the guard that refuses every spelling of "everything" with the count it
would take, the dry run that previews what a redrive or discard would touch without publishing
anything, and a workflow waiting on a parked activity with its retry action."""

from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI

from slotflow.client import Client, HttpTransport
from slotflow.contracts import (
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    HistoryEvent,
    RedriveDeadLetters,
    WorkflowFailed,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.dlq import DeadLetterStatus
from slotflow.contracts.topics import DLQ_COMMANDS, DLQ_EVENTS, JOBS_DUE, SCHEDULE_COMMANDS, WORKFLOW_HISTORY
from slotflow.contracts.workflows import WORKFLOW_TERMINATED
from slotflow.settings import KafkaSettings
from tests.integration.api.conftest import TEST_TOKEN, Emitter
from tests.integration.api.helpers import eventually_json
from tests.integration.dlq.helpers import read_messages

NOW = datetime.now(UTC).replace(microsecond=0)


def letter(
    kafka: KafkaSettings,
    offset: int,
    status: DeadLetterStatus = "parked",
    *,
    topic: str | None = None,
    source: str = "claimer",
    reason: str = "unknown_handler",
    **extra: object,
) -> DeadLetterStatusChanged:
    topic = topic or kafka.topic(JOBS_DUE)
    return DeadLetterStatusChanged(
        dead_letter_id=f"{topic}:0:{offset}",
        status=status,
        reason=reason,
        topic=topic,
        source_service=source,
        partition=0,
        offset=offset,
        at=NOW + timedelta(seconds=offset),
        first_seen=NOW + timedelta(seconds=offset),
        **extra,  # type: ignore[arg-type]
    )


async def seed(kafka: KafkaSettings, emit: Emitter, client: httpx.AsyncClient) -> None:
    """Five parked letters: two runs, a workflow's parked activity, a poison command, a foreign one."""
    letters = [
        letter(kafka, 1, run_id="pay@2026-12-01T00:00:00Z", job_id="pay"),
        letter(kafka, 2, run_id="pay@2026-12-02T00:00:00Z", job_id="pay"),
        letter(
            kafka, 3, reason="attempts_exhausted", run_id="o-1/2", job_id="o-1", workflow_id="o-1", sequence=2
        ),
        letter(kafka, 4, topic=kafka.topic(SCHEDULE_COMMANDS), source="ticker", reason="unknown_type"),
        letter(kafka, 5, topic="someone-elses.v1", reason="permanent_error"),
    ]
    for one in letters:
        await emit(DLQ_EVENTS, one, id=f"{one.dead_letter_id}/parked", key=one.dead_letter_id)
    await eventually_json(client, "/v1/dlq", lambda b: len(b["items"]) == 5)


async def test_every_spelling_of_everything_is_refused_with_the_count_it_would_take(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    await seed(kafka, emit, client)
    for action, extra in (("redrive", {}), ("discard", {"reason": "obsolete"})):
        for selection in (
            {},
            {"since": "1970-01-01T00:00:00Z"},
            {"status": "parked"},
            {"until": "2100-01-01T00:00:00Z"},
        ):
            for dry_run in (False, True):
                response = await client.post(
                    f"/v1/dlq/{action}", params={"dry_run": dry_run}, json={"selection": selection, **extra}
                )
                assert response.status_code == 422, (action, selection, response.text)
                detail = response.json()["detail"]
                assert f"would {action} every parked dead letter" in detail
                # The count it would take: a bulk redrive leaves the workflow's letter out.
                assert (
                    "(4 now, besides 1 workflows' parked activities)" if action == "redrive" else "(5 now)"
                ) in detail
                assert 'send "all": true to mean every one' in detail
    assert (await client.get("/v1/commands", params={"command_type": "dlq.redrive"})).json()["items"] == []
    # Saying so is a preview of all of them (nothing published).
    everything = await client.post("/v1/dlq/redrive", params={"dry_run": True}, json={"all": True})
    assert everything.status_code == 200, everything.text
    assert (everything.json()["would_touch"], everything.json()["left_out"]) == (4, 1)


async def test_a_dry_run_says_what_a_redrive_would_touch_and_publishes_nothing(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    await seed(kafka, emit, client)
    jobs = kafka.topic(JOBS_DUE)
    preview = await client.post(
        "/v1/dlq/redrive", params={"dry_run": True}, json={"selection": {"topic": jobs}}
    )
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert (body["action"], body["dry_run"], body["would_touch"], body["matching"]) == ("redrive", True, 2, 2)
    assert body["owners"] == {"claimer": 2}
    assert body["left_out"] == 1
    assert "retried only through their workflow" in body["left_out_reason"]
    assert [(i["dead_letter_id"], i["owner"], i["kind"]) for i in body["items"]] == [
        (f"{jobs}:0:1", "claimer", "run"),
        (f"{jobs}:0:2", "claimer", "run"),
    ]
    # With the current definition the ticker re-issues them; a limit caps what it would touch.
    current = await client.post(
        "/v1/dlq/redrive",
        params={"dry_run": True},
        json={"selection": {"topic": jobs}, "definition": "current", "limit": 1},
    )
    assert (current.json()["would_touch"], current.json()["matching"], current.json()["owners"]) == (
        1,
        2,
        {"ticker": 1},
    )
    # Named by id, the workflow's letter goes to its workflow; a foreign topic has no owner.
    named = await client.post(
        "/v1/dlq/redrive",
        params={"dry_run": True},
        json={
            "selection": {
                "ids": [f"{jobs}:0:3", "someone-elses.v1:0:5", f"{kafka.topic(SCHEDULE_COMMANDS)}:0:4"]
            }
        },
    )
    items = {i["dead_letter_id"]: (i["owner"], i["kind"], i["refusal"]) for i in named.json()["items"]}
    assert items[f"{jobs}:0:3"] == ("orchestrator", "activity", None)
    assert items[f"{kafka.topic(SCHEDULE_COMMANDS)}:0:4"] == ("ticker", "record", None)
    owner, kind, refusal = items["someone-elses.v1:0:5"]
    assert (owner, kind) == (None, None)
    assert "not one of this deployment's" in refusal
    assert (named.json()["owners"], named.json()["refused"], named.json()["left_out"]) == (
        {"orchestrator": 1, "ticker": 1},
        1,
        0,
    )
    # A discard's preview; and one matching nothing says so (0), as the real command is rejected.
    discard = await client.post(
        "/v1/dlq/discard",
        params={"dry_run": True},
        json={"selection": {"reason": "unknown_type"}, "reason": "x"},
    )
    assert (discard.json()["action"], discard.json()["would_touch"]) == ("discard", 1)
    nothing = await client.post(
        "/v1/dlq/redrive", params={"dry_run": True}, json={"selection": {"reason": "nope"}}
    )
    assert nothing.json()["would_touch"] == 0
    # Nothing was published by any of it.
    assert (await client.get("/v1/commands", params={"command_type": "dlq.redrive"})).json()["items"] == []
    assert (await client.get("/v1/commands", params={"command_type": "dlq.discard"})).json()["items"] == []
    # The real one publishes.
    real = await client.post("/v1/dlq/redrive", json={"selection": {"topic": jobs}, "definition": "current"})
    assert real.status_code == 202


async def test_statuses_and_owners_answers_are_shown(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    asked = letter(
        kafka,
        7,
        "redriving",
        redrive_target="claimer",
        redrive_count=1,
        note="redrive asked of the claimer by c-1",
        command_id="c-1",
    )
    refused = letter(
        kafka,
        8,
        "redrive_failed",
        redrive_target="orchestrator",
        workflow_id="o-9",
        sequence=3,
        note="refused by the orchestrator: o-9 already compensated this step: payments.void ran at #6",
    )
    for one in (asked, refused):
        await emit(DLQ_EVENTS, one, id=f"{one.dead_letter_id}/{one.status}", key=one.dead_letter_id)
    body = await eventually_json(
        client, f"/v1/dlq/{asked.dead_letter_id}", lambda b: b["status"] == "redriving"
    )
    assert (body["redrive_target"], body["note"]) == ("claimer", "redrive asked of the claimer by c-1")
    failed = (await client.get("/v1/dlq", params={"status": "redrive_failed"})).json()["items"]
    assert [(f["dead_letter_id"], f["workflow_id"], f["sequence"]) for f in failed] == [
        (refused.dead_letter_id, "o-9", 3)
    ]
    assert "already compensated this step" in failed[0]["note"]
    by_workflow = (await client.get("/v1/dlq", params={"workflow_id": "o-9"})).json()["items"]
    assert [f["dead_letter_id"] for f in by_workflow] == [refused.dead_letter_id]


async def test_a_workflow_waiting_on_a_parked_activity_says_so_with_its_retry(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    wid = "order-7"
    events = [
        WorkflowStarted(workflow_id=wid, sequence=1, workflow_type="order", command_id="s-1"),
        ActivityScheduled(
            workflow_id=wid, sequence=2, activity="shipping.book", run_id=f"{wid}/2", on_dead_letter="park"
        ),
        ActivityParked(
            workflow_id=wid,
            sequence=3,
            scheduled_sequence=2,
            reason="attempts_exhausted",
            error_type="CarrierClosed",
        ),
    ]
    for event in events:
        await emit(
            WORKFLOW_HISTORY, event, id=history_event_id(wid, event.sequence), key=wid, source="orchestrator"
        )
    path = f"/v1/workflows/{quote(wid, safe='')}"
    body = await eventually_json(client, path, lambda b: b.get("last_sequence") == 3)
    assert body["status"] == "running"
    assert body["waiting"] == "activity parked: shipping.book #2 (attempts_exhausted)"
    retry_path = f"{path}/activities/2/retry"
    assert body["actions"] == [
        {
            "action": "retry_activity",
            "sequence": 2,
            "activity": "shipping.book",
            "method": "POST",
            "path": retry_path,
        }
    ]
    assert [s["state"] for s in body["steps"]] == ["parked"]
    sent = await client.post(retry_path, json={"reason": "carrier back"})
    assert sent.status_code == 202, sent.text
    command = await eventually_json(
        client,
        f"/v1/commands/{sent.json()['command_id']}",
        lambda b: b["command_type"] == "workflow.retry_activity",
    )
    assert command["subject"] == wid
    assert (await client.post(f"{path}/activities/0/retry")).status_code == 422


def _at_sequence(sequence: int, body: dict[str, Any]) -> bool:
    return body.get("last_sequence") == sequence


def _parked_history(wid: str) -> list[HistoryEvent]:
    """Started, one activity scheduled to park, and parked."""
    return [
        WorkflowStarted(workflow_id=wid, sequence=1, workflow_type="order", command_id=f"s-{wid}"),
        ActivityScheduled(
            workflow_id=wid, sequence=2, activity="shipping.book", run_id=f"{wid}/2", on_dead_letter="park"
        ),
        ActivityParked(
            workflow_id=wid, sequence=3, scheduled_sequence=2, reason="attempts_exhausted", error_type="E"
        ),
    ]


async def test_the_attention_filter_lists_workflows_waiting_on_a_parked_activity(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    """A parked activity waits on a person whatever its age (the claimers already gave up): the
    attention filter lists its workflow at any age. A step merely scheduled, one retried since, and
    a terminated workflow's parked step (nothing retries a closed workflow) are not listed, and the
    terminated one offers no retry."""
    parked = _parked_history("att-parked")
    running = _parked_history("att-running")[:2]
    retried = [
        *_parked_history("att-retried"),
        ActivityRetried(
            workflow_id="att-retried", sequence=4, scheduled_sequence=2, redrive=1, command_id="retry-1"
        ),
    ]
    terminated = [
        *_parked_history("att-terminated"),
        WorkflowFailed(
            workflow_id="att-terminated", sequence=4, error_type=WORKFLOW_TERMINATED, message="by ops"
        ),
    ]
    for events in (parked, running, retried, terminated):
        for event in events:
            wid = event.workflow_id
            await emit(
                WORKFLOW_HISTORY,
                event,
                id=history_event_id(wid, event.sequence),
                key=wid,
                source="orchestrator",
            )
    last = {"att-parked": 3, "att-running": 2, "att-retried": 4, "att-terminated": 4}
    for wid, sequence in last.items():
        await eventually_json(client, f"/v1/workflows/{wid}", partial(_at_sequence, sequence))
    for age in ("1d", "0s"):
        listed = await client.get("/v1/workflows", params={"attention": age})
        assert listed.status_code == 200, listed.text
        assert [w["workflow_id"] for w in listed.json()["items"]] == ["att-parked"], age
    shown = (await client.get("/v1/workflows/att-terminated")).json()
    assert shown["status"] == "terminated"
    assert [s["state"] for s in shown["steps"]] == ["parked"]
    assert shown["waiting"] is None
    assert shown["actions"] == []


async def test_the_client_keeps_the_status_of_an_all_selection_over_http(
    app: FastAPI, client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    """`all=True` with a status (`slotflow dlq redrive --all --status redrive_failed`, through the
    api by default) means every letter of that status. The HTTP transport used to drop the whole
    selection with `all`, so the api took every *parked* letter instead: here four, not the one."""
    await seed(kafka, emit, client)
    failed = letter(kafka, 6, "redrive_failed", run_id="pay@2026-12-06T00:00:00Z", job_id="pay")
    await emit(DLQ_EVENTS, failed, id=f"{failed.dead_letter_id}/redrive_failed", key=failed.dead_letter_id)
    await eventually_json(client, "/v1/dlq", lambda b: len(b["items"]) == 6)
    transport = HttpTransport("http://api.test", token=TEST_TOKEN, transport=httpx.ASGITransport(app=app))
    async with transport:
        api = Client(transport)
        preview = await api.preview_redrive(DeadLetterFilter(status="redrive_failed"), all=True)
        assert (preview.would_touch, [i["dead_letter_id"] for i in preview.items]) == (
            1,
            [failed.dead_letter_id],
        )
        discard = await api.preview_discard(DeadLetterFilter(status="redrive_failed"), all=True)
        assert discard.would_touch == 1
        sent = await api.redrive_dead_letters(DeadLetterFilter(status="redrive_failed"), all=True)
    # What the api published for the dlq: every letter of that status, not every parked one.
    published = [m for _, m in await read_messages(kafka, kafka.topic(DLQ_COMMANDS), 1)]
    [command] = [m for m in published if isinstance(m, RedriveDeadLetters)]
    assert (command.all, command.selection.status) == (True, "redrive_failed"), (sent, command)
