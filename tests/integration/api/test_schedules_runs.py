"""Schedules and runs projected from their topics and served over HTTP."""

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from slotflow.contracts import (
    JobDue,
    RunCompleted,
    RunFailed,
    RunRetrying,
    RunStarted,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
)
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS
from slotflow.core.identity import job_due_event_id, run_id
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import cron, eventually_json

NOW = datetime.now(UTC).replace(microsecond=0)


async def test_schedule_lifecycle_is_projected_in_order(client: httpx.AsyncClient, emit: Emitter) -> None:
    sid = "billing.nightly"
    created = ScheduleCreated(
        schedule_id=sid, definition=cron(tags=("money-moving",)), paused=False, next_fire_at=NOW
    )
    await emit(SCHEDULE_EVENTS, created, id="e1", key=sid)
    await emit(
        SCHEDULE_EVENTS,
        SchedulePaused(schedule_id=sid, reason="audit week", resume_at=None),
        id="e2",
        key=sid,
    )
    body = await eventually_json(client, f"/v1/schedules/{sid}", lambda b: b["paused"])
    assert body["pause_reason"] == "audit week"
    assert body["handler"] == "payouts.pay"
    assert body["tags"] == ["money-moving"]
    assert body["spec"] == {"kind": "cron", "expression": "0 2 * * *", "timezone": "UTC"}
    # Paused until resumed by hand: no slot is promised.
    assert (body["status"], body["next_fire_at"], body["next_slots"]) == ("paused", None, [])

    await emit(SCHEDULE_EVENTS, ScheduleResumed(schedule_id=sid, next_fire_at=NOW), id="e3", key=sid)
    body = await eventually_json(client, f"/v1/schedules/{sid}", lambda b: not b["paused"])
    assert len(body["next_slots"]) == 5
    assert [s["at"][11:19] for s in body["next_slots"]] == ["02:00:00"] * 5
    assert body["next_fire_at"] == body["next_slots"][0]["at"]
    updated = ScheduleUpdated(
        schedule_id=sid, definition=cron("*/5 * * * *", handler="payouts.v2"), next_fire_at=NOW
    )
    await emit(SCHEDULE_EVENTS, updated, id="e4", key=sid)
    body = await eventually_json(client, f"/v1/schedules/{sid}", lambda b: b["handler"] == "payouts.v2")
    assert body["paused"] is False
    assert body["pause_reason"] is None

    listed = (await client.get("/v1/schedules", params={"handler": "payouts.v2"})).json()
    assert [s["schedule_id"] for s in listed["items"]] == [sid]
    assert (await client.get("/v1/schedules", params={"paused": "true"})).json()["items"] == []

    await emit(SCHEDULE_EVENTS, ScheduleDeleted(schedule_id=sid), id="e5", key=sid)
    await eventually_json(client, f"/v1/schedules/{sid}", lambda b: b["deleted"] and b["next_slots"] == [])
    assert (await client.get("/v1/schedules")).json()["items"] == []
    deleted = (await client.get("/v1/schedules", params={"deleted": "true"})).json()["items"]
    assert [s["schedule_id"] for s in deleted] == [sid]


async def test_unknown_ids_are_404_with_a_message(client: httpx.AsyncClient) -> None:
    for url in (
        "/v1/schedules/nope",
        "/v1/runs/nope@2026-01-01T00:00:00Z",
        "/v1/workflows/nope",
        "/v1/dlq/t:0:1",
    ):
        response = await client.get(url)
        assert response.status_code == 404, url
        assert "not known" in response.json()["detail"]


async def test_pagination_walks_every_schedule_once(client: httpx.AsyncClient, emit: Emitter) -> None:
    ids = [f"s{i:02d}" for i in range(7)]
    for sid in ids:
        await emit(
            SCHEDULE_EVENTS,
            ScheduleCreated(schedule_id=sid, definition=cron(tags=("t",)), paused=False, next_fire_at=NOW),
            id=f"c-{sid}",
            key=sid,
        )
    await eventually_json(client, "/v1/schedules?limit=500", lambda b: len(b["items"]) == 7)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3, "tag": "t"}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/schedules", params=params)).json()
        seen += [s["schedule_id"] for s in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    assert pages == 3
    bad = await client.get("/v1/schedules", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 422
    assert "cursor" in bad.json()["detail"]
    assert (await client.get("/v1/schedules", params={"limit": 0})).status_code == 422
    assert "limit" in (await client.get("/v1/schedules", params={"limit": 501})).json()["detail"]


async def test_run_events_out_of_order_end_in_the_right_state(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    job = "payouts"
    slot = NOW - timedelta(minutes=3)
    rid = run_id(job, slot)
    base: dict[str, Any] = {"run_id": rid, "job_id": job, "slot": slot, "owner": "claimer-a"}
    t0 = slot + timedelta(seconds=1)
    # Attempt 2 completes; its RunStarted and attempt 1's facts arrive after the completion.
    completed = RunCompleted(
        **base, attempt=2, fence_token=2, result={"paid": 3}, started_at=t0, finished_at=t0
    )
    await emit(RUN_EVENTS, completed, id=f"{rid}/2/completed", key=job)
    await emit(
        RUN_EVENTS,
        RunStarted(**base, attempt=2, fence_token=2, started_at=t0),
        id=f"{rid}/2/started",
        key=job,
    )
    await emit(
        RUN_EVENTS,
        RunStarted(**base, attempt=1, fence_token=1, started_at=slot),
        id=f"{rid}/1/started",
        key=job,
    )
    failed = RunFailed(
        **base,
        attempt=1,
        fence_token=1,
        error_type="Timeout",
        message="bank slow",
        retryable=True,
        finished_at=slot,
    )
    await emit(RUN_EVENTS, failed, id=f"{rid}/1/failed", key=job)
    retrying = RunRetrying(
        **base, attempt=1, fence_token=1, next_attempt=2, retry_at=t0, delay=timedelta(seconds=1)
    )
    await emit(RUN_EVENTS, retrying, id=f"{rid}/1/retrying", key=job)
    await emit(JOBS_DUE, JobDue(run_id=rid, job_id=job, slot=slot, handler="payouts.pay"), id=rid, key=job)
    retry_due = JobDue(run_id=rid, job_id=job, slot=slot, attempt=2, kind="retry", handler="payouts.pay")
    await emit(JOBS_DUE, retry_due, id=job_due_event_id(rid, 2), key=job)
    # A redelivered RunStarted (same id, same token) changes nothing.
    await emit(
        RUN_EVENTS,
        RunStarted(**base, attempt=1, fence_token=1, started_at=slot),
        id=f"{rid}/1/started",
        key=job,
    )

    url = f"/v1/runs/{quote(rid, safe='')}"
    body = await eventually_json(
        client,
        url,
        lambda b: len(b["attempts"]) == 2 and b["attempts"][0]["outcome"] == "retrying" and b["kind"],
    )
    assert body["state"] == "completed"
    assert body["attempt"] == 2
    assert body["fence_token"] == 2
    assert body["owner"] == "claimer-a"
    assert body["result"] == {"paid": 3}
    # Completed: only the final outcome on the run; the first attempt's error stays on it.
    assert body["error"] is None
    assert body["completions"] == 1
    assert body["kind"] == "scheduled"
    assert body["handler"] == "payouts.pay"
    first, second = body["attempts"]
    assert (first["attempt"], first["fence_token"], first["outcome"]) == (1, 1, "retrying")
    assert first["error"]["message"] == "bank slow"
    assert (second["attempt"], second["fence_token"], second["outcome"]) == (2, 2, "completed")
    assert body["timings"]["produced_at"] is not None
    assert body["timings"]["duration_ms"] is not None
    # Rounded to the microsecond: no float noise such as 390.34200000000004.
    for name in ("duration_ms", "lateness_ms"):
        value = body["timings"][name]
        assert value == round(value, 3)
        assert len(repr(value).split(".")[-1]) <= 3

    runs = (
        await client.get(
            f"/v1/schedules/{job}/runs", params={"from": (slot - timedelta(seconds=1)).isoformat()}
        )
    ).json()
    assert [r["run_id"] for r in runs["items"]] == [rid]
    assert (await client.get("/v1/runs", params={"state": "completed"})).json()["items"][0]["run_id"] == rid
    assert (await client.get("/v1/runs", params={"state": "running"})).json()["items"] == []
    outside = (await client.get(f"/v1/schedules/{job}/runs", params={"to": slot.isoformat()})).json()
    assert outside["items"] == []


async def test_a_late_start_never_undoes_a_running_retry(client: httpx.AsyncClient, emit: Emitter) -> None:
    job, slot = "reports", NOW - timedelta(minutes=1)
    rid = run_id(job, slot)
    base: dict[str, Any] = {"run_id": rid, "job_id": job, "slot": slot, "owner": "b"}
    retry_due = JobDue(run_id=rid, job_id=job, slot=slot, attempt=2, kind="retry", handler="reports.build")
    await emit(JOBS_DUE, retry_due, id=job_due_event_id(rid, 2), key=job)
    failed = RunFailed(
        **base, attempt=1, fence_token=1, error_type="E", message="m", retryable=True, finished_at=slot
    )
    await emit(RUN_EVENTS, failed, id=f"{rid}/1/failed", key=job)
    await emit(
        RUN_EVENTS,
        RunStarted(**base, attempt=1, fence_token=1, started_at=slot),
        id=f"{rid}/1/started",
        key=job,
    )
    url = f"/v1/runs/{quote(rid, safe='')}"
    body = await eventually_json(client, url, lambda b: len(b["attempts"]) == 1)
    # The JobDue for attempt 2 is newer than anything attempt 1 says: the run waits for a claimer.
    assert body["state"] == "due"
    assert body["attempts"][0]["outcome"] == "failed"
    await emit(
        RUN_EVENTS,
        RunStarted(**base, attempt=2, fence_token=2, started_at=slot),
        id=f"{rid}/2/started",
        key=job,
    )
    await eventually_json(client, url, lambda b: b["state"] == "running" and b["fence_token"] == 2)


async def test_bad_query_parameters_are_422_with_the_field_named(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/schedules/x/runs", params={"from": "yesterday"})
    assert response.status_code == 422
    assert "from" in response.json()["detail"]
    naive = await client.get("/v1/schedules/x/runs", params={"from": "2026-01-01T00:00:00"})
    assert naive.status_code == 422
    assert naive.json()["detail"].startswith("from: has no UTC offset")
    reversed_range = await client.get(
        "/v1/schedules/x/runs", params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
    )
    assert reversed_range.status_code == 422
    assert "after" in reversed_range.json()["detail"]


async def test_an_unknown_run_state_is_a_422_naming_the_states(client: httpx.AsyncClient) -> None:
    for url in ("/v1/runs", "/v1/schedules/s/runs"):
        response = await client.get(url, params={"state": "bogus"})
        assert response.status_code == 422, url
        assert "dead_lettered" in response.json()["detail"]
    assert (await client.get("/v1/runs", params={"state": "completed"})).status_code == 200


async def test_every_run_list_is_newest_first_and_pages_in_that_order(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    job = "ordered"
    slots = [NOW - timedelta(hours=h) for h in (3, 1, 2)]
    for slot in slots:
        due = JobDue(run_id=run_id(job, slot), job_id=job, slot=slot, handler="reports.build")
        await emit(JOBS_DUE, due, id=job_due_event_id(due.run_id, 1), key=job)
    newest_first = [run_id(job, slot) for slot in sorted(slots, reverse=True)]
    await eventually_json(client, f"/v1/runs?job_id={job}", lambda b: len(b["items"]) == 3)
    for url, params in (("/v1/runs", {"job_id": job}), (f"/v1/schedules/{job}/runs", {})):
        seen: list[str] = []
        cursor: dict[str, str] = {}
        while True:
            page = (await client.get(url, params={**params, "limit": 1, **cursor})).json()
            seen.extend(r["run_id"] for r in page["items"])
            if page["next_cursor"] is None:
                break
            cursor = {"cursor": page["next_cursor"]}
        assert seen == newest_first, url
