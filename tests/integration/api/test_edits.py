"""Edits that keep what they do not name, on the real stack (ticker and api)."""

from datetime import datetime, timedelta

import httpx

from slotflow.contracts import ScheduleDefinition
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.api.helpers import eventually_json
from tests.integration.ticker.support import tickers

DEFINITION = {
    "spec": {"kind": "interval", "every": "PT1M"},
    "handler": "reports.build",
    "payload": {"region": "eu", "format": "pdf"},
    "tags": ["finance"],
    "retry": {"max_attempts": 7, "base": "PT2S"},
}


async def test_a_patch_changes_only_the_fields_it_names(
    client: httpx.AsyncClient, kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool
) -> None:
    async with tickers(kafka, pg_dsn):
        created = await client.post(
            "/v1/schedules", params={"wait": 30}, json={"schedule_id": "reports", "definition": DEFINITION}
        )
        assert created.status_code == 200, created.text
        await eventually_json(client, "/v1/schedules/reports", lambda b: b["handler"] == "reports.build")

        patched = await client.patch(
            "/v1/schedules/reports",
            params={"wait": 30},
            json={"spec": {"every": "PT30S"}, "handler": "reports.v2", "retry": {"max_attempts": 3}},
        )
        assert patched.status_code == 200, patched.text
        answer = patched.json()
        assert answer["status"] == "accepted"
        assert {(c["field"], c["from"], c["to"]) for c in answer["changes"]} == {
            ("spec.every", "PT1M", "PT30S"),
            ("handler", "reports.build", "reports.v2"),
            ("retry.max_attempts", 7, 3),
        }
        body = await eventually_json(client, "/v1/schedules/reports", lambda b: b["handler"] == "reports.v2")
        definition = body["definition"]
        assert definition["spec"]["every"] == "PT30S"
        assert definition["spec"]["anchor"] == "2000-01-01T00:00:00Z"
        # What the patch did not name is exactly as it was, in the ticker's own row too: every
        # JobDue from now on carries the payload.
        assert definition["payload"] == {"region": "eu", "format": "pdf"}
        assert definition["tags"] == ["finance"]
        assert definition["retry"]["base"] == "PT2S"
        stored = ScheduleDefinition.model_validate_json(
            await pg_pool.fetchval(
                "SELECT definition::text FROM ticker.schedules WHERE schedule_id = 'reports'"
            )
        )
        assert stored.payload == {"region": "eu", "format": "pdf"}
        assert stored.retry.max_attempts == 3
        assert stored.retry.base == timedelta(seconds=2)

        # A patch that cannot fit is a 422 before anything is published; a field that is not a
        # definition's is one too.
        bad = await client.patch("/v1/schedules/reports", json={"retry": {"max_attempts": -1}})
        assert bad.status_code == 422
        assert "retry.max_attempts" in bad.json()["detail"]
        unknown = await client.patch("/v1/schedules/reports", json={"hander": "typo"})
        assert unknown.status_code == 422
        assert "hander" in unknown.json()["detail"]


async def test_a_second_pause_keeps_the_first_ones_reason_and_resume_at(
    client: httpx.AsyncClient, kafka: KafkaSettings, pg_dsn: str
) -> None:
    async with tickers(kafka, pg_dsn):
        created = await client.post(
            "/v1/schedules", params={"wait": 30}, json={"schedule_id": "payouts", "definition": DEFINITION}
        )
        assert created.status_code == 200, created.text
        resume_at = (datetime.now().astimezone() + timedelta(hours=3)).replace(microsecond=0)
        first = await client.post(
            "/v1/schedules/payouts/pause",
            params={"wait": 30},
            json={"reason": "bank maintenance", "resume_at": resume_at.isoformat()},
        )
        assert first.status_code == 200, first.text
        second = await client.post("/v1/schedules/payouts/pause", params={"wait": 30})
        assert second.status_code == 200, second.text
        body = await eventually_json(client, "/v1/commands/" + second.json()["command_id"], lambda b: True)
        assert body["status"] == "accepted"
        shown = (await client.get("/v1/schedules/payouts")).json()
        assert shown["pause_reason"] == "bank maintenance"
        assert datetime.fromisoformat(shown["resume_at"]) == resume_at
        # A new reason given replaces the old one; the resume time it did not name stays.
        third = await client.post(
            "/v1/schedules/payouts/pause", params={"wait": 30}, json={"reason": "extended"}
        )
        assert third.status_code == 200, third.text
        shown = await eventually_json(
            client, "/v1/schedules/payouts", lambda b: b["pause_reason"] == "extended"
        )
        assert datetime.fromisoformat(shown["resume_at"]) == resume_at
