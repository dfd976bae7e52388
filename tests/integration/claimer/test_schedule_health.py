"""The schedules list answers "is this healthy?" on the real stack (ticker, claimer, api).

Each schedule's newest run and its failure streak, search by id prefix, pause and resume of
several schedules at once with one reason, and the calendar of every schedule's next firings.
"""

from datetime import timedelta
from typing import Any

import httpx

from slotflow.contracts import CreateSchedule, IntervalSpec, OnceSpec, RetryPolicy, ScheduleDefinition
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


async def _listed(api: httpx.AsyncClient, **params: Any) -> dict[str, dict[str, Any]]:
    answer = await api.get("/v1/schedules", params=params)
    assert answer.status_code == 200, answer.text
    return {row["schedule_id"]: row for row in answer.json()["items"]}


async def test_list_shows_last_run_failure_streak_and_acts_on_several(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    registry.register("health.ok", _ok)
    registry.register("health.bad", _bad)
    every_second = ScheduleDefinition(spec=IntervalSpec(every=SECOND), handler="health.ok")
    failing = every_second.model_copy(update={"handler": "health.bad", "retry": RetryPolicy(max_attempts=1)})
    async with tickers(kafka, pg_dsn):
        await start_claimer()
        now = await db_now(db)
        await send(producer, kafka, CreateSchedule(schedule_id="hl.good", definition=every_second))
        await send(producer, kafka, CreateSchedule(schedule_id="hl.bad", definition=failing))
        hourly = ScheduleDefinition(spec=IntervalSpec(every=timedelta(hours=1)), handler="health.ok")
        await send(producer, kafka, CreateSchedule(schedule_id="other.hourly", definition=hourly))
        soon = (now + timedelta(minutes=30)).replace(microsecond=0)
        once = ScheduleDefinition(spec=OnceSpec(at=soon), handler="health.ok")
        await send(producer, kafka, CreateSchedule(schedule_id="other.once", definition=once))

        async def unhealthy() -> dict[str, dict[str, Any]] | None:
            rows = await _listed(api)
            bad, good = rows.get("hl.bad"), rows.get("hl.good")
            if bad is None or good is None or bad["failure_streak"] < 2 or good["last_run"] is None:
                return None
            return rows if good["last_run"]["state"] == "completed" else None

        rows = await assert_eventually(
            unhealthy, timeout=30, message="hl.bad failing twice, hl.good completing"
        )
        assert rows["hl.bad"]["last_run"]["run_id"].startswith("hl.bad@")
        assert rows["hl.bad"]["last_run"]["state"] in ("dead_lettered", "running", "due")
        assert rows["hl.good"]["failure_streak"] == 0
        assert rows["other.hourly"]["last_run"] is None
        assert rows["other.hourly"]["failure_streak"] == 0
        detail = (await api.get("/v1/schedules/hl.bad")).json()
        assert detail["failure_streak"] >= 2

        # Search by id prefix.
        assert set(await _listed(api, id_prefix="hl.")) == {"hl.bad", "hl.good"}
        assert set(await _listed(api, id_prefix="other.h")) == {"other.hourly"}
        assert await _listed(api, id_prefix="nothing") == {}

        # Pause both hl.* at once, with one reason; the others stay active.
        paused = await api.post(
            "/v1/schedules/pause",
            params={"wait": 20},
            json={"schedule_ids": ["hl.good", "hl.bad", "hl.good"], "reason": "bank maintenance"},
        )
        assert paused.status_code == 202, paused.text
        commands = paused.json()["commands"]
        assert [c["schedule_id"] for c in commands] == ["hl.good", "hl.bad"]
        assert [c["status"] for c in commands] == ["accepted", "accepted"]
        rows = await _listed(api)
        for sid in ("hl.good", "hl.bad"):
            assert rows[sid]["status"] == "paused"
            assert rows[sid]["pause_reason"] == "bank maintenance"
        assert rows["other.hourly"]["status"] == "active"

        # With the every-second schedules paused, the next two hours hold three firings: the
        # hourly schedule's two and the one-shot's, soonest first.
        calendar = (await api.get("/v1/calendar", params={"hours": 2})).json()
        assert [(e["schedule_id"]) for e in calendar["items"]].count("other.hourly") == 2
        assert [e["schedule_id"] for e in calendar["items"] if e["schedule_id"] != "other.hourly"] == [
            "other.once"
        ]
        fire_times = [e["fire_at"] for e in calendar["items"]]
        assert fire_times == sorted(fire_times)
        assert calendar["truncated"] is False
        once_entry = next(e for e in calendar["items"] if e["schedule_id"] == "other.once")
        assert once_entry["run_id"] == f"other.once@{soon.strftime('%Y-%m-%dT%H:%M:%SZ')}"

        resumed = await api.post(
            "/v1/schedules/resume", params={"wait": 20}, json={"schedule_ids": ["hl.good", "hl.bad"]}
        )
        assert [c["status"] for c in resumed.json()["commands"]] == ["accepted", "accepted"]
        rows = await _listed(api, id_prefix="hl.")
        assert {r["status"] for r in rows.values()} == {"active"}
        # Resumed, the every-second schedules fill the calendar past its limit.
        busy = (await api.get("/v1/calendar", params={"hours": 1, "limit": 20})).json()
        assert len(busy["items"]) == 20
        assert busy["truncated"] is True

        # The streak ends at the first completed run: fix the handler.
        fixed = await api.patch("/v1/schedules/hl.bad", params={"wait": 20}, json={"handler": "health.ok"})
        assert fixed.status_code == 200, fixed.text

        async def healed() -> bool:
            row = (await _listed(api, id_prefix="hl.bad"))["hl.bad"]
            return bool(row["failure_streak"] == 0 and row["last_run"]["state"] == "completed")

        await assert_eventually(healed, timeout=30, message="hl.bad healed after its handler was fixed")

    # A bulk body is checked like any other: no ids, or an id that is not one path segment.
    assert (await api.post("/v1/schedules/pause", json={"schedule_ids": []})).status_code == 422
    refused = await api.post("/v1/schedules/resume", json={"schedule_ids": ["team/a"]})
    assert refused.status_code == 422, refused.text
