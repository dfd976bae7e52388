"""Retention of the read model: the purge keeps exactly the runs that ended inside the retention,
and the audit judges no slot before what it purged (issue 23)."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from slotflow.contracts import JobDue, RunCompleted, ScheduleCreated
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS
from slotflow.core.identity import run_id
from slotflow.pg.pool import Pool
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import CLIENT_HEADERS, Emitter
from tests.integration.api.helpers import eventually_json, interval

DAY = timedelta(days=1)
SID = "daily-kept"
# Day 30 is left out: whether its run ended before "now minus 30 days" depends on the time of
# day the test runs. Every other day is well inside or well outside the retention.
DAYS = [d for d in range(46) if d != 30]


@pytest.fixture
async def app(api_settings: Settings) -> AsyncIterator[FastAPI]:
    chosen = api_settings.model_copy(
        update={
            "api": api_settings.api.model_copy(
                update={"retention_days": 30, "purge_interval_seconds": 0.2, "purge_batch_size": 4}
            )
        }
    )
    application = create_app(chosen)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api.test", timeout=40, headers=CLIENT_HEADERS
    ) as http:
        yield http


async def test_purge_keeps_exactly_what_the_retention_says_and_the_audit_says_so(
    app: FastAPI, client: httpx.AsyncClient, emit: Emitter
) -> None:
    now = datetime.now(UTC)
    anchor = now.replace(hour=0, minute=0, second=0, microsecond=0)
    created = ScheduleCreated(
        schedule_id=SID, definition=interval(86400, anchor), paused=False, next_fire_at=anchor + DAY
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{SID}/created", key=SID, occurred_at=anchor - 60 * DAY)
    slots = {d: anchor - d * DAY for d in DAYS}
    for slot in slots.values():
        rid = run_id(SID, slot)
        due = JobDue(run_id=rid, job_id=SID, slot=slot, handler="reports.build", fire_at=slot)
        await emit(JOBS_DUE, due, id=rid, key=SID, occurred_at=slot)
        done = RunCompleted(
            run_id=rid,
            job_id=SID,
            slot=slot,
            attempt=1,
            fence_token=1,
            owner="c1",
            started_at=slot,
            finished_at=slot + timedelta(minutes=1),
        )
        await emit(RUN_EVENTS, done, id=f"{rid}/1/completed", key=SID, occurred_at=slot)

    pool: Pool = app.state.services.pool
    kept = {run_id(SID, slots[d]) for d in DAYS if d < 30}

    async def purged() -> bool:
        # Every run projected (the newest one completed) and the old ones gone.
        rows = await pool.fetch("SELECT run_id, state FROM api.runs WHERE job_id = $1", SID)
        return {r["run_id"] for r in rows} == kept and all(r["state"] == "completed" for r in rows)

    await assert_eventually(purged, timeout=60, message="exactly the runs of the last 30 days kept")
    dues = await pool.fetch("SELECT DISTINCT run_id FROM api.run_dues")
    assert {r["run_id"] for r in dues} == kept
    tries = await pool.fetch("SELECT DISTINCT run_id FROM api.run_attempts")
    assert {r["run_id"] for r in tries} == kept
    horizon = await pool.fetchval("SELECT horizon FROM api.retention")
    assert now - 30 * DAY < horizon < datetime.now(UTC) - 30 * DAY + timedelta(minutes=5)

    params = {"schedule": SID, "from": (anchor - 45 * DAY).isoformat(), "to": now.isoformat()}
    body = await eventually_json(client, "/v1/audit?" + str(httpx.QueryParams(params)), lambda b: True)
    # Slots before the horizon are not judged (not "missed"): the audit says from when it vouches.
    assert datetime.fromisoformat(body["audited_from"]) == horizon
    assert "purged" in body["note"]
    assert "SLOTFLOW_API_RETENTION_DAYS=30" in body["note"]
    assert body["summary"]["missed"] == 0
    # Emitted now for old slots, so judged late; every kept slot is judged, none before the horizon.
    assert body["summary"]["late"] + body["summary"]["fired"] == len(kept)
    assert {s["run_id"] for s in body["slots"]} == kept
    assert all(datetime.fromisoformat(s["slot"]) >= horizon for s in body["slots"])
