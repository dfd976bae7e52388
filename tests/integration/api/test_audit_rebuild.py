"""The audit over projected events, and a rebuild that reproduces the read model row for row."""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from slotflow.contracts import (
    CommandAccepted,
    DeadLetterStatusChanged,
    JobDue,
    RunCompleted,
    RunDeadLettered,
    RunStarted,
    ScheduleCreated,
    SchedulePaused,
    SlotSkipped,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS, WORKFLOW_HISTORY
from slotflow.core.identity import run_id
from slotflow.pg.pool import create_pool
from slotflow.pg.statements import sql
from slotflow.settings import PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_api.config import Settings
from slotflow_api.projector import rebuild
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json, interval, read_model_snapshot

HOUR = timedelta(hours=1)


async def _seed_schedule(emit: Emitter, sid: str, now: datetime) -> list[datetime]:
    """An hourly schedule created 7 hours ago; returns its slots in the last 6 hours, oldest first."""
    anchor = now.replace(minute=0, second=0, microsecond=0)
    created_at = anchor - 6 * HOUR - timedelta(minutes=5)
    slots = [anchor - h * HOUR for h in range(6, 0, -1)]
    created = ScheduleCreated(
        schedule_id=sid, definition=interval(3600, anchor), paused=False, next_fire_at=slots[0]
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{sid}/created", key=sid, occurred_at=created_at)

    def due(slot: datetime, **extra: Any) -> JobDue:
        return JobDue(run_id=run_id(sid, slot), job_id=sid, slot=slot, handler="reports.build", **extra)

    def done(slot: datetime, token: int) -> RunCompleted:
        return RunCompleted(
            run_id=run_id(sid, slot),
            job_id=sid,
            slot=slot,
            attempt=1,
            fence_token=token,
            owner=f"c{token}",
            started_at=slot,
            finished_at=slot,
        )

    # Slot 0: fired on time (its jittered fire time is the moment it is produced: read right
    # before producing, as a loaded machine can take seconds between the emits).
    await emit(JOBS_DUE, due(slots[0], fire_at=datetime.now(UTC)), id=run_id(sid, slots[0]), key=sid)
    await emit(RUN_EVENTS, done(slots[0], 1), id=f"{run_id(sid, slots[0])}/1/completed", key=sid)
    # Slot 1: the JobDue is produced hours after the slot.
    await emit(JOBS_DUE, due(slots[1]), id=run_id(sid, slots[1]), key=sid)
    # Slot 2: skipped by the misfire policy.
    skipped = SlotSkipped(
        schedule_id=sid,
        run_id=run_id(sid, slots[2]),
        slot=slots[2],
        reason="misfire",
        detail="fire_once kept the newest",
    )
    await emit(SCHEDULE_EVENTS, skipped, id=f"{sid}/skip/2", key=sid, occurred_at=slots[2])
    # Slot 3: two claims both completed: a duplicated effect.
    await emit(JOBS_DUE, due(slots[3], fire_at=datetime.now(UTC)), id=run_id(sid, slots[3]), key=sid)
    for token in (1, 2):
        await emit(
            RUN_EVENTS, done(slots[3], token), id=f"{run_id(sid, slots[3])}/{token}/completed", key=sid
        )
    # Slot 4: nothing at all. Then paused before slot 5, so slot 5 is the policy's doing.
    paused = SchedulePaused(schedule_id=sid, reason="maintenance", resume_at=None)
    await emit(
        SCHEDULE_EVENTS, paused, id=f"{sid}/paused", key=sid, occurred_at=slots[5] - timedelta(minutes=1)
    )
    return slots


async def test_audit_reports_every_category(client: httpx.AsyncClient, emit: Emitter) -> None:
    now = datetime.now(UTC)
    slots = await _seed_schedule(emit, "hourly", now)
    params = {
        "schedule": "hourly",
        "from": slots[0].isoformat(),
        "to": (slots[-1] + timedelta(minutes=1)).isoformat(),
    }
    url = "/v1/audit?" + httpx.QueryParams(params).__str__()
    body = await eventually_json(
        client,
        url,
        # Schedule events and jobs are different topics: wait for both to be projected.
        lambda b: (
            b["summary"]["duplicated_effect"] == 1
            and b["summary"]["fired"] == 1
            and b["summary"]["skipped_by_policy"] == 2
        ),
    )
    statuses = [(s["slot"], s["status"]) for s in body["slots"]]
    assert [s for _, s in statuses] == [
        "fired",
        "late",
        "skipped_by_policy",
        "duplicated_effect",
        "missed",
        "skipped_by_policy",
    ]
    assert body["summary"] == {
        "fired": 1,
        "missed": 1,
        "skipped_by_policy": 2,
        "late": 1,
        "held": 0,
        "duplicated_effect": 1,
    }
    assert body["expected"] == 6
    # The headline: what became of each slot, adding up to `expected`. Slot 1's run has a JobDue
    # and nothing more yet: fired, still in flight, not a success.
    assert body["outcomes"] == {
        "succeeded": 1,
        "failed": 0,
        "in_flight": 1,
        "held": 0,
        "missed": 1,
        "skipped": 2,
        "duplicated_effect": 1,
    }
    assert [s["outcome"] for s in body["slots"]] == [
        "succeeded",
        "in_flight",
        "skipped",
        "duplicated_effect",
        "missed",
        "skipped",
    ]
    assert body["slots"][0]["run_state"] == "completed"
    assert body["from"].startswith(slots[0].isoformat()[:19])
    assert body["slots"][2]["detail"].startswith("misfire")
    assert body["slots"][5]["detail"] == "paused: passed while paused"
    assert body["slots"][1]["run_id"] == run_id("hourly", slots[1])

    assert (await client.get("/v1/audit", params={"schedule": "nope"})).status_code == 404
    backwards = await client.get(
        "/v1/audit", params={"schedule": "hourly", "from": params["to"], "to": params["from"]}
    )
    assert backwards.status_code == 422
    # A window reaching back before the schedule existed expects nothing before its creation.
    wide = (
        await client.get("/v1/audit", params={"schedule": "hourly", "from": "1900-01-01T00:00:00Z"})
    ).json()
    assert wide["expected"] + wide["pending"] == 7


async def test_rebuild_reproduces_every_row(
    app: FastAPI, client: httpx.AsyncClient, emit: Emitter, api_settings: Settings
) -> None:
    now = datetime.now(UTC)
    await _seed_schedule(emit, "hourly", now)
    rid = run_id("other", now)
    started = RunStarted(
        run_id=rid, job_id="other", slot=now, attempt=1, fence_token=1, owner="c", started_at=now
    )
    await emit(RUN_EVENTS, started, id=f"{rid}/1/started", key="other")
    posted = await client.post("/v1/workflows", json={"workflow_id": "w1", "workflow_type": "order"})
    command = await client.post("/v1/schedules/hourly/resume")
    accepted = CommandAccepted(
        command_id=command.json()["command_id"], command_type="schedule.resume", subject="hourly"
    )
    await emit(SCHEDULE_EVENTS, accepted, id="ack-1", key="hourly")
    letter = DeadLetterStatusChanged(
        dead_letter_id="t:1:2",
        status="parked",
        reason="undecodable",
        topic="t",
        source_service="ticker",
        at=now,
    )
    await emit(DLQ_EVENTS, letter, id="dl-1", key="t:1:2")
    assert posted.status_code == 202
    # The workflow's typed history is folded into its row: a rebuild must fold it the same way.
    begun = WorkflowStarted(workflow_id="w1", sequence=1, workflow_type="order", command_id="c")
    await emit(WORKFLOW_HISTORY, begun, id=history_event_id("w1", 1), key="w1")

    schema = api_settings.api.db_schema
    pool = await create_pool(PostgresSettings(dsn=api_settings.postgres.dsn), min_size=1, max_size=2)
    try:

        async def complete() -> dict[str, list[tuple[Any, ...]]] | None:
            # The acknowledgement changes a row without adding one: counts alone cannot see it. Read
            # before the snapshot: once accepted it stays so, so the snapshot then holds it too.
            acknowledged = await pool.fetchval(
                sql("SELECT status = 'accepted' FROM {schema}.commands WHERE command_id = $1", schema),
                command.json()["command_id"],
            )
            snap = await read_model_snapshot(pool, schema)
            counts = {name: len(rows) for name, rows in snap.items()}
            wanted = {
                "runs": 4,
                "workflows": 1,
                "dead_letters": 1,
                "commands": 2,
                "skipped_slots": 1,
                "schedule_timeline": 2,
                "run_attempts": 4,
                # JobDue and run events travel on different topics: a run's row can exist before
                # its JobDue is projected, so the JobDues are counted themselves.
                "run_dues": 3,
                "workflow_events": 1,
                "workflow_history": 2,
            }
            settled = acknowledged and all(counts[t] == n for t, n in wanted.items())
            return snap if settled else None

        before = await assert_eventually(complete, timeout=60)
        old_group = await pool.fetchval(sql("SELECT group_id FROM {schema}.projector_state", schema))
        new_group = await rebuild(pool, api_settings)
        assert new_group != old_group
        assert (await read_model_snapshot(pool, schema))["runs"] == []

        async def rebuilt() -> bool:
            return bool(await read_model_snapshot(pool, schema) == before)

        await assert_eventually(rebuilt, timeout=60, message="the rebuilt read model equals the original")
        assert await pool.fetchval(sql("SELECT group_id FROM {schema}.projector_state", schema)) == new_group
    finally:
        await pool.close()


async def test_a_schedule_whose_runs_all_dead_lettered_is_not_called_fired_in_the_headline(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    # Every run fired on time and every run dead-lettered: the audit once read "6 fired" and
    # nothing else, in green. Its headline now counts them as fired and failed.
    sid = "captures"
    now = datetime.now(UTC)
    anchor = now.replace(minute=0, second=0, microsecond=0)
    slots = [anchor - h * HOUR for h in range(6, 0, -1)]
    created = ScheduleCreated(
        schedule_id=sid, definition=interval(3600, anchor), paused=False, next_fire_at=slots[0]
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{sid}/created", key=sid, occurred_at=slots[0] - HOUR)
    for slot in slots:
        rid = run_id(sid, slot)
        due = JobDue(run_id=rid, job_id=sid, slot=slot, handler="payments.capture", fire_at=datetime.now(UTC))
        await emit(JOBS_DUE, due, id=rid, key=sid)
        dead = RunDeadLettered(
            run_id=rid,
            job_id=sid,
            slot=slot,
            attempt=3,
            fence_token=3,
            owner="c1",
            reason="attempts_exhausted",
        )
        await emit(RUN_EVENTS, dead, id=f"{rid}/3/dead_lettered", key=sid)
    params = {
        "schedule": sid,
        "from": slots[0].isoformat(),
        "to": (slots[-1] + timedelta(minutes=1)).isoformat(),
    }
    url = "/v1/audit?" + str(httpx.QueryParams(params))
    body = await eventually_json(client, url, lambda b: b["outcomes"]["failed"] == len(slots))
    assert body["outcomes"] == {
        "succeeded": 0,
        "failed": 6,
        "in_flight": 0,
        "held": 0,
        "missed": 0,
        "skipped": 0,
        "duplicated_effect": 0,
    }
    assert body["summary"]["fired"] == 6  # how they fired: on time
    assert {s["run_state"] for s in body["slots"]} == {"dead_lettered"}
