"""What a schedule will do next, as the api shows it, follows the ticker on the real stack."""

from datetime import datetime, timedelta
from typing import Any

import httpx

from slotflow.settings import KafkaSettings
from tests.integration.api.helpers import eventually_json
from tests.integration.ticker.support import tickers


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def _create(client: httpx.AsyncClient, sid: str, definition: dict[str, Any]) -> None:
    response = await client.post(
        "/v1/schedules", params={"wait": 30}, json={"schedule_id": sid, "definition": definition}
    )
    assert response.status_code == 200, response.text


async def test_next_fire_follows_the_grid_and_a_fired_one_shot_is_finished(
    client: httpx.AsyncClient, kafka: KafkaSettings, pg_dsn: str
) -> None:
    async with tickers(kafka, pg_dsn):
        await _create(client, "every2", {"spec": {"kind": "interval", "every": "PT2S"}, "handler": "h.x"})
        soon = (datetime.now().astimezone() + timedelta(seconds=2)).isoformat()
        await _create(client, "once", {"spec": {"kind": "once", "at": soon}, "handler": "h.x"})

        # Wait until the ticker has fired a few slots: the next fire the create announced is past.
        await eventually_json(client, "/v1/schedules/every2", lambda b: sum(b["runs_by_state"].values()) >= 3)
        listed = (await client.get("/v1/schedules")).json()["items"]
        by_id = {row["schedule_id"]: row for row in listed}
        shown = (await client.get("/v1/schedules/every2")).json()
        fired = (await client.get("/v1/runs", params={"job_id": "every2", "limit": 1})).json()["items"]
        newest_slot = _at(fired[0]["slot"])
        for row in (by_id["every2"], shown):
            # Never a slot already fired, and never further than one interval past the newest.
            assert newest_slot < _at(row["next_fire_at"]) <= newest_slot + timedelta(seconds=4), row
            assert row["status"] == "active"
        assert shown["next_fire_at"] == shown["next_slots"][0]["at"]

        once = await eventually_json(client, "/v1/schedules/once", lambda b: b["next_fire_at"] is None)
        assert once["status"] == "finished"
        assert once["next_slots"] == []
        assert by_id["once"]["status"] in ("active", "finished")


async def test_a_pause_with_resume_at_promises_only_slots_after_it(
    client: httpx.AsyncClient, kafka: KafkaSettings, pg_dsn: str
) -> None:
    async with tickers(kafka, pg_dsn):
        definition = {
            "spec": {"kind": "interval", "every": "PT60S"},
            "handler": "h.x",
            "misfire": {"policy": "skip", "grace": "PT1S"},
        }
        await _create(client, "minutely", definition)
        # Half a minute after a slot of the minute grid (anchored at 2000-01-01): a resume_at in
        # the second after a slot would rightly promise that slot's catch-up (it is within the
        # policy's 1 s grace), and a resume_at taken from the wall clock fell there once a minute.
        resume_at = (datetime.now().astimezone() + timedelta(minutes=10)).replace(second=30, microsecond=0)
        paused = await client.post(
            "/v1/schedules/minutely/pause",
            params={"wait": 30},
            json={"reason": "maintenance", "resume_at": resume_at.isoformat()},
        )
        assert paused.status_code == 200, paused.text
        body = await eventually_json(client, "/v1/schedules/minutely", lambda b: b["paused"])
        assert _at(body["resume_at"]) == resume_at
        assert body["pause_reason"] == "maintenance"
        assert body["next_slots"], body
        assert all(_at(slot["at"]) >= resume_at for slot in body["next_slots"])
        assert _at(body["next_fire_at"]) >= resume_at
        assert body["status"] == "paused"
        assert body["catch_up_at_resume"] is False

        # Paused until resumed by hand: nothing is promised at all.
        await client.post("/v1/schedules/minutely/resume", params={"wait": 30})
        await client.post("/v1/schedules/minutely/pause", params={"wait": 30}, json={"reason": "stop"})
        body = await eventually_json(
            client, "/v1/schedules/minutely", lambda b: b["paused"] and b["resume_at"] is None
        )
        assert body["next_fire_at"] is None
        assert body["next_slots"] == []
