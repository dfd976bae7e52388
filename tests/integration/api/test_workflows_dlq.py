"""Workflows (commands, activities, timers) and the DLQ, projected and served."""

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx

from slotflow.contracts import (
    DeadLetterStatusChanged,
    FireTimerFired,
    JobDue,
    RunStarted,
    StartTimer,
    TimerFired,
)
from slotflow.contracts.dlq import DeadLetterStatus
from slotflow.contracts.timers import sleep_timer_id
from slotflow.contracts.topics import (
    DLQ_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    TIMER_EVENTS,
)
from slotflow.core.identity import activity_run_id
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json

NOW = datetime.now(UTC).replace(microsecond=0)


async def test_workflow_page_gathers_commands_activities_and_timers(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    wid = "order-42"
    started = await client.post(
        "/v1/workflows", json={"workflow_id": wid, "workflow_type": "order", "input": {"sku": 9}}
    )
    assert started.status_code == 202
    activity = activity_run_id(wid, 3)
    due = JobDue(
        run_id=activity,
        job_id=wid,
        slot=NOW,
        kind="activity",
        handler="payments.authorize",
        workflow_id=wid,
        sequence=3,
    )
    await emit(JOBS_DUE, due, id=activity, key=wid)
    run_started = RunStarted(
        run_id=activity,
        job_id=wid,
        slot=NOW,
        attempt=1,
        fence_token=1,
        owner="c1",
        workflow_id=wid,
        sequence=3,
        started_at=NOW,
    )
    await emit(RUN_EVENTS, run_started, id=f"{activity}/1/started", key=wid)
    # A timer command on the public topic (which the ticker refuses) is listed among the commands,
    # never as one of the workflow's timers: sent first, so the read model has it before the rest.
    forged = StartTimer(
        timer_id=sleep_timer_id(wid, 6), fire_at=NOW, on_fire=FireTimerFired(owner=wid, sequence=6)
    )
    await emit(SCHEDULE_COMMANDS, forged, id="timer-cmd-public", key=forged.timer_id)
    await eventually_json(
        client, "/v1/commands/timer-cmd-public", lambda b: b["command_type"] == "timer.start"
    )
    sleep = StartTimer(
        timer_id=sleep_timer_id(wid, 4),
        fire_at=NOW + timedelta(hours=24),
        on_fire=FireTimerFired(owner=wid, sequence=4),
    )
    await emit(TIMER_COMMANDS, sleep, id="timer-cmd-1", key=sleep.timer_id)
    short = StartTimer(
        timer_id=sleep_timer_id(wid, 5), fire_at=NOW, on_fire=FireTimerFired(owner=wid, sequence=5)
    )
    await emit(TIMER_COMMANDS, short, id="timer-cmd-2", key=short.timer_id)
    fired = TimerFired(timer_id=short.timer_id, owner=wid, sequence=5, fire_at=NOW, fired_at=NOW)
    await emit(TIMER_EVENTS, fired, id=f"{short.timer_id}/fired", key=wid)
    await client.post(f"/v1/workflows/{wid}/cancel", json={"reason": "customer asked"})

    body = await eventually_json(
        client,
        f"/v1/workflows/{wid}",
        lambda b: (
            b["cancel_requested"]
            and sorted(t["status"] for t in b["timers"]) == ["fired", "pending"]
            and len(b["pending_activities"]) == 1
        ),
    )
    assert body["workflow_type"] == "order"
    assert body["status"] == "requested"
    assert body["input"] == {"sku": 9}
    assert body["cancel_reason"] == "customer asked"
    assert body["current_step"] == "payments.authorize"
    assert body["pending_activities"][0]["state"] == "running"
    assert [t["status"] for t in body["pending_timers"]] == ["pending"]
    assert sorted(t["timer_id"] for t in body["timers"]) == [sleep.timer_id, short.timer_id]

    history = (await client.get(f"/v1/workflows/{wid}/history", params={"limit": 500})).json()
    origins = sorted(entry["origin"] for entry in history["items"])
    assert origins == ["activity", "activity", "command", "command", "timer", "timer", "timer"]
    assert body["history_length"] == 7
    page = (await client.get(f"/v1/workflows/{wid}/history", params={"limit": 2})).json()
    assert len(page["items"]) == 2
    assert page["next_cursor"]
    listed = (await client.get("/v1/workflows", params={"type": "order"})).json()
    assert [w["workflow_id"] for w in listed["items"]] == [wid]
    assert (await client.get("/v1/workflows", params={"status": "completed"})).json()["items"] == []
    assert (await client.get("/v1/workflows/nope/history")).status_code == 404
    run = await client.get(f"/v1/runs/{quote(activity, safe='')}")
    assert run.json()["workflow_id"] == wid


async def test_dlq_entries_follow_their_status_events(client: httpx.AsyncClient, emit: Emitter) -> None:
    def letter(
        dead_letter_id: str, status: DeadLetterStatus, at: datetime, **extra: object
    ) -> DeadLetterStatusChanged:
        return DeadLetterStatusChanged(
            dead_letter_id=dead_letter_id,
            status=status,
            reason=str(extra.pop("reason", "undecodable")),
            topic="slotflow.jobs.due.v1",
            source_service="claimer",
            at=at,
            **extra,  # type: ignore[arg-type]
        )

    await emit(
        DLQ_EVENTS,
        letter("jobs:0:7", "parked", NOW, job_id="payouts", error="bad json"),
        id="d1",
        key="jobs:0:7",
    )
    await emit(
        DLQ_EVENTS, letter("jobs:0:8", "parked", NOW, reason="attempts_exhausted"), id="d2", key="jobs:0:8"
    )
    redriven = letter(
        "jobs:0:7",
        "redriven",
        NOW + timedelta(seconds=5),
        job_id="payouts",
        redrive_count=1,
        command_id="redrive-1",
    )
    await emit(DLQ_EVENTS, redriven, id="d3", key="jobs:0:7")
    body = await eventually_json(client, "/v1/dlq/jobs:0:7", lambda b: b["status"] == "redriven")
    assert body["redrive_count"] == 1
    assert body["error"] == "bad json"
    parked = (await client.get("/v1/dlq", params={"status": "parked"})).json()["items"]
    assert [d["dead_letter_id"] for d in parked] == ["jobs:0:8"]
    assert [
        d["dead_letter_id"]
        for d in (await client.get("/v1/dlq", params={"job_id": "payouts"})).json()["items"]
    ] == ["jobs:0:7"]
    by_reason = (
        await client.get("/v1/dlq", params={"reason": "attempts_exhausted", "source": "claimer"})
    ).json()
    assert len(by_reason["items"]) == 1
    # The dlq service named the command that redrove the entry: that command counts as accepted.
    assert (await client.get("/v1/commands/redrive-1")).json()["status"] == "accepted"
