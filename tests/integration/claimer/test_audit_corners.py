"""The audit on the real stack (ticker, claimer, api) in the corners a backfill, a pause, an
update of the spec, a delete and a failing handler create."""

import asyncio
import itertools
from datetime import datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import (
    Backfill,
    CreateSchedule,
    DeleteSchedule,
    IntervalSpec,
    PauseSchedule,
    ResumeSchedule,
    RetryPolicy,
    ScheduleDefinition,
    UpdateSchedule,
)
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.ticker.support import db_now, send, tickers

SECOND = timedelta(seconds=1)


async def _ok(ctx: RunContext) -> object:
    return {"run": ctx.run_id}


async def _bad(ctx: RunContext) -> object:
    raise PermanentError(f"no data for {ctx.run_id}")


async def _audit(api: httpx.AsyncClient, sid: str, start: datetime, end: datetime) -> dict[str, Any]:
    answer = await api.get(
        "/v1/audit", params={"schedule": sid, "from": start.isoformat(), "to": end.isoformat()}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _settled(
    api: httpx.AsyncClient, sid: str, start: datetime, end: datetime, want: int
) -> dict[str, Any]:
    """The audit once at least ``want`` slots are judged and every run in it has finished."""

    async def probe() -> dict[str, Any] | None:
        body = await _audit(api, sid, start, end)
        runs = (await api.get("/v1/runs", params={"job_id": sid, "limit": 500})).json()["items"]
        open_runs = [r for r in runs if r["state"] not in ("completed", "skipped", "dead_lettered")]
        return body if body["expected"] >= want and body["pending"] == 0 and not open_runs else None

    result: dict[str, Any] = await assert_eventually(probe, timeout=60, message=f"the audit of {sid} settled")
    return result


async def test_the_audit_is_right_around_backfills_pauses_updates_deletes_and_failures(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    registry.register("audit.ok", _ok)
    registry.register("audit.bad", _bad)
    every_second = ScheduleDefinition(spec=IntervalSpec(every=SECOND), handler="audit.ok")
    async with tickers(kafka, pg_dsn):
        await start_claimer()
        t0 = await db_now(db)
        for sid in ("bf", "pz", "up", "dl"):
            await send(producer, kafka, CreateSchedule(schedule_id=sid, definition=every_second))
        failing = every_second.model_copy(
            update={"handler": "audit.bad", "retry": RetryPolicy(max_attempts=1)}
        )
        await send(producer, kafka, CreateSchedule(schedule_id="dead", definition=failing))
        await asyncio.sleep(2)

        # Backfill: the ten seconds before the schedule existed, on its grid.
        created = (await db_now(db)).replace(microsecond=0) - 3 * SECOND
        before = created - 10 * SECOND
        await send(producer, kafka, Backfill(schedule_id="bf", start=before, end=t0.replace(microsecond=0)))
        # Pause for three seconds, then resume.
        await send(producer, kafka, PauseSchedule(schedule_id="pz", reason="window"))
        await asyncio.sleep(3)
        await send(producer, kafka, ResumeSchedule(schedule_id="pz"))
        # A new spec: every two seconds from now on.
        two = ScheduleDefinition(spec=IntervalSpec(every=2 * SECOND), handler="audit.ok")
        await send(producer, kafka, UpdateSchedule(schedule_id="up", definition=two))
        await asyncio.sleep(4)
        await send(producer, kafka, DeleteSchedule(schedule_id="dl"))
        await asyncio.sleep(3)
        end = await db_now(db) - 2 * SECOND
        window_start = t0 - timedelta(hours=1)

        backfilled = await _settled(api, "bf", window_start, end, want=15)
        paused = await _settled(api, "pz", window_start, end, want=6)
        updated = await _settled(api, "up", window_start, end, want=6)
        deleted = await _settled(api, "dl", window_start, end, want=4)
        dead = await _settled(api, "dead", window_start, end, want=4)

    for body in (backfilled, paused, updated, deleted, dead):
        assert body["summary"]["missed"] == 0, body
        assert body["summary"]["duplicated_effect"] == 0, body
        # From an hour before: audited from the creation, and the answer says so.
        assert datetime.fromisoformat(body["audited_from"]) > window_start
        assert "created at" in body["note"]

    # Backfilled slots on the grid are fired slots with their kind, not runs off the grid.
    assert backfilled["unscheduled"] == []
    kinds = [slot["kind"] for slot in backfilled["slots"] if datetime.fromisoformat(slot["slot"]) < t0]
    assert len(kinds) >= 10
    assert set(kinds) == {"backfill"}
    assert all(slot["status"] == "fired" for slot in backfilled["slots"] if slot["kind"] == "backfill")

    # A pause: every slot inside it either fired at the resume (within grace) or was skipped by policy.
    assert {slot["status"] for slot in paused["slots"]} <= {"fired", "late", "skipped_by_policy"}

    # An update: slots on the old grid before it, on the new (even seconds) after it.
    slots = [datetime.fromisoformat(slot["slot"]) for slot in updated["slots"]]
    assert len(slots) == len(set(slots))
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(slots)}
    assert 2.0 in gaps

    # A delete: nothing expected after it, nothing missed.
    deleted_slots = [datetime.fromisoformat(slot["slot"]) for slot in deleted["slots"]]
    assert max(deleted_slots) < end - SECOND

    # Runs that dead-lettered: the slot fired, the audit lists the run as dead-lettered.
    assert dead["dead_lettered"], dead
    assert {run["state"] for run in dead["dead_lettered"]} == {"dead_lettered"}
    assert all(slot["status"] in ("fired", "late") for slot in dead["slots"])
