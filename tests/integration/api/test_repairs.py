"""An operator's repairs over HTTP (POST /v1/schedules/{id}/rerun and /mark): the dry run counts
what a repair would touch and what it leaves out and why, the real one publishes the command with
exactly those slots, a range that matches nothing is a 422 with the reason, and the audit shows who
re-ran or marked a slot (a forced re-run beside its slot, never as a duplicated effect)."""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import (
    REGISTRY,
    JobDue,
    MarkSlots,
    RerunSlots,
    RunCompleted,
    RunDeadLettered,
    RunStarted,
    ScheduleCreated,
    SlotRerun,
    SlotSkipped,
    SlotsMarked,
    SlotsRerun,
)
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS, SCHEDULE_COMMANDS, SCHEDULE_EVENTS
from slotflow.core.identity import rerun_run_id, run_id
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json, interval

HOUR = timedelta(hours=1)
SID = "merchant-payouts"


def _done(rid: str, slot: datetime, token: int = 1) -> RunCompleted:
    return RunCompleted(
        run_id=rid,
        job_id=SID,
        slot=slot,
        attempt=1,
        fence_token=token,
        owner="c1",
        started_at=slot,
        finished_at=slot,
    )


async def _seed(emit: Emitter) -> list[datetime]:
    """An hourly schedule's last six slots: completed, dead-lettered, running, missed, skipped by the
    misfire policy, completed. Returns the slots, oldest first."""
    anchor = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    slots = [anchor - h * HOUR for h in range(6, 0, -1)]
    created = ScheduleCreated(
        schedule_id=SID, definition=interval(3600, anchor), paused=False, next_fire_at=slots[0]
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{SID}/created", key=SID, occurred_at=slots[0] - HOUR)
    for index in (0, 1, 2, 5):
        slot, rid = slots[index], run_id(SID, slots[index])
        due = JobDue(run_id=rid, job_id=SID, slot=slot, handler="payouts.pay", fire_at=datetime.now(UTC))
        await emit(JOBS_DUE, due, id=rid, key=SID)
        if index in (0, 5):
            await emit(RUN_EVENTS, _done(rid, slot), id=f"{rid}/1/completed", key=SID)
        elif index == 1:
            dead = RunDeadLettered(
                run_id=rid,
                job_id=SID,
                slot=slot,
                attempt=1,
                fence_token=1,
                owner="c1",
                reason="permanent_error",
            )
            await emit(RUN_EVENTS, dead, id=f"{rid}/1/dead_lettered", key=SID)
        else:
            started = RunStarted(
                run_id=rid, job_id=SID, slot=slot, attempt=1, fence_token=1, owner="c1", started_at=slot
            )
            await emit(RUN_EVENTS, started, id=f"{rid}/1/started", key=SID)
    skipped = SlotSkipped(
        schedule_id=SID, run_id=run_id(SID, slots[4]), slot=slots[4], reason="misfire", detail="skip"
    )
    await emit(SCHEDULE_EVENTS, skipped, id=f"{SID}/skip/4", key=SID, occurred_at=slots[4])
    return slots


async def _audit(client: httpx.AsyncClient, slots: list[datetime], ready: Any = None) -> dict[str, Any]:
    params = {
        "schedule": SID,
        "from": slots[0].isoformat(),
        "to": (slots[-1] + timedelta(minutes=1)).isoformat(),
    }
    url = "/v1/audit?" + str(httpx.QueryParams(params))
    return await eventually_json(
        client,
        url,
        ready
        or (
            lambda b: (
                len(b["slots"]) == 6
                and [s["run_state"] for s in b["slots"]]
                == ["completed", "dead_lettered", "running", None, None, "completed"]
            )
        ),
    )


async def test_a_dry_run_counts_what_a_repair_touches_and_the_real_one_publishes_exactly_that(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    slots = await _seed(emit)
    await _audit(client, slots)
    whole = {"from": slots[0].isoformat(), "to": slots[-1].isoformat()}

    dry = await client.post(
        f"/v1/schedules/{SID}/rerun", json={**whole, "reason": "handler fixed", "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert (body["dry_run"], body["count"], body["left_out_count"]) == (True, 3, 3)
    assert [(s["slot"], s["action"]) for s in body["slots"]] == [
        (_iso(slots[1]), "rerun"),
        (_iso(slots[3]), "rerun"),
        (_iso(slots[4]), "rerun"),
    ]
    left = {s["slot"]: s["reason"] for s in body["left_out"]}
    assert "pass force" in left[_iso(slots[0])]
    assert "pass force" in left[_iso(slots[5])]
    assert "running" in left[_iso(slots[2])]
    assert body["command_id"] is None

    forced = await client.post(
        f"/v1/schedules/{SID}/rerun", json={**whole, "force": True, "reason": "pay again", "dry_run": True}
    )
    assert (forced.json()["count"], forced.json()["left_out_count"]) == (5, 1)

    marks = await client.post(
        f"/v1/schedules/{SID}/mark", json={**whole, "mark": "done", "reason": "by hand", "dry_run": True}
    )
    assert marks.status_code == 200, marks.text
    assert [s["slot"] for s in marks.json()["slots"]] == [_iso(slots[i]) for i in (1, 3, 4)]
    assert "completed" in {s["state"] for s in marks.json()["left_out"]}

    async with TopicTail(kafka, (SCHEDULE_COMMANDS,)) as commands:
        real = await client.post(
            f"/v1/schedules/{SID}/rerun", json={**whole, "force": True, "reason": "pay again"}
        )
        assert real.status_code == 202, real.text
        assert real.json()["count"] == 5
        mark = await client.post(
            f"/v1/schedules/{SID}/mark",
            json={"from": slots[3].isoformat(), "mark": "skipped", "reason": "holiday"},
        )
        assert mark.status_code == 202, mark.text
        assert mark.json()["count"] == 1

        def published() -> list[Any]:
            return [REGISTRY.parse(e) for e in commands.seen_envelopes()]

        await assert_eventually(lambda: len(published()) == 2, timeout=30, message="both commands")
        rerun, marked = published()
        assert isinstance(rerun, RerunSlots)
        assert isinstance(marked, MarkSlots)
        assert (rerun.slots, rerun.forced, rerun.reason) == (
            (slots[1], slots[3], slots[4]),
            (slots[0], slots[5]),
            "pay again",
        )
        assert (marked.slots, marked.mark, marked.reason) == ((slots[3],), "skipped", "holiday")
        assert real.json()["command_id"] == commands.seen_envelopes()[0].id


async def test_a_range_that_matches_nothing_is_a_422_with_the_reason_and_an_unknown_schedule_a_404(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    slots = await _seed(emit)
    await _audit(client, slots)
    running = await client.post(
        f"/v1/schedules/{SID}/rerun", json={"from": slots[2].isoformat(), "reason": "try", "force": True}
    )
    assert running.status_code == 422, running.text
    assert "can be re-run" in running.json()["detail"]
    assert "running" in running.json()["detail"]
    between = slots[0] + timedelta(minutes=30)
    empty = await client.post(
        f"/v1/schedules/{SID}/mark", json={"from": between.isoformat(), "mark": "done", "reason": "x"}
    )
    assert empty.status_code == 422, empty.text
    assert "holds no slot" in empty.json()["detail"]
    backwards = await client.post(
        f"/v1/schedules/{SID}/rerun",
        json={"from": slots[1].isoformat(), "to": slots[0].isoformat(), "reason": "x"},
    )
    assert backwards.status_code == 422
    nobody = await client.post(
        "/v1/schedules/nobody/rerun", json={"from": slots[1].isoformat(), "reason": "x"}
    )
    assert nobody.status_code == 404, nobody.text
    no_reason = await client.post(
        f"/v1/schedules/{SID}/rerun", json={"from": slots[1].isoformat(), "reason": ""}
    )
    assert no_reason.status_code == 422


async def test_the_audit_shows_who_marked_or_reran_a_slot_and_a_forced_rerun_beside_its_slot(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    slots = await _seed(emit)
    await _audit(client, slots)
    marked = SlotsMarked(
        schedule_id=SID, slots=(slots[3],), mark="done", principal="alice", reason="paid by hand"
    )
    await emit(SCHEDULE_EVENTS, marked, id="cmd-mark/marked", key=SID)
    again = rerun_run_id(SID, slots[0], 1)
    rerun = SlotsRerun(
        schedule_id=SID,
        reruns=(SlotRerun(slot=slots[0], run_id=again, number=1, forced=True),),
        handler="payouts.pay",
        principal="bob",
        reason="the bank lost it",
    )
    await emit(SCHEDULE_EVENTS, rerun, id="cmd-rerun/rerun", key=SID)
    await emit(
        JOBS_DUE,
        JobDue(run_id=again, job_id=SID, slot=slots[0], kind="manual", handler="payouts.pay", rerun=1),
        id=f"{again}/rerun/1",
        key=SID,
    )
    await emit(RUN_EVENTS, _done(again, slots[0]), id=f"{again}/1/completed", key=SID)

    def repaired(body: dict[str, Any]) -> bool:
        first, fourth = body["slots"][0], body["slots"][3]
        return (
            bool(fourth["repairs"])
            and bool(first["repairs"])
            and first["repairs"][0]["run_state"] == "completed"
        )

    body = await _audit(client, slots, repaired)
    fourth = body["slots"][3]
    assert fourth["detail"].startswith("marked done by alice: paid by hand")
    assert fourth["repairs"][0]["said"] == "marked done by alice: paid by hand"
    first = body["slots"][0]
    assert first["status"] != "duplicated_effect"
    assert first["run_id"] == run_id(SID, slots[0])
    assert (first["repairs"][0]["action"], first["repairs"][0]["by"], first["repairs"][0]["run_id"]) == (
        "forced_rerun",
        "bob",
        again,
    )
    assert body["summary"]["duplicated_effect"] == 0
    assert again not in {r["run_id"] for r in body["unscheduled"]}
    # A marked slot may still be re-run later.
    later = await client.post(
        f"/v1/schedules/{SID}/rerun",
        json={"from": slots[3].isoformat(), "reason": "after all", "dry_run": True},
    )
    assert [s["slot"] for s in later.json()["slots"]] == [_iso(slots[3])]


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


async def test_a_backfill_report_shows_the_runs_the_slots_already_have(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    # A backfill's JobDue has the run id its slot always has, so over slots that already ran it
    # creates nothing: its dry run showed `state: null` for those runs (only backfilled runs were
    # looked up) and `--follow` waited for them forever.
    slots = await _seed(emit)
    await _audit(client, slots)
    params = {"from": slots[0].isoformat(), "to": (slots[1] + timedelta(minutes=1)).isoformat()}
    report = await eventually_json(
        client,
        f"/v1/schedules/{SID}/backfill?" + str(httpx.QueryParams(params)),
        lambda b: b["expected"] == 2,
    )
    assert [s["state"] for s in report["slots"]] == ["completed", "dead_lettered"]
    assert (report["completed"], report["failed"], report["not_started"]) == (1, 1, 0)
    assert report["finished"] is True
