"""`slotflow schedule update` changes only the flags given and says what changes."""

import httpx

from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.api.conftest import AUTH
from tests.integration.cli.conftest import Cli
from tests.integration.ticker.support import tickers


async def test_update_keeps_the_payload_and_tags_and_prints_the_changes(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str, api_url: str
) -> None:
    async with tickers(kafka, pg_dsn):
        created = await cli(
            "schedule", "create", "reports", "--every", "1m", "--handler", "reports.build",
            "--payload", '{"region": "eu"}', "--tag", "finance", "--max-attempts", "7", "--wait", "30",
        )  # fmt: skip
        assert created.code == 0, created
        updated = await cli(
            "schedule", "update", "reports", "--every", "30s", "--handler", "reports.v2", "--wait", "30"
        )
        assert updated.code == 0, updated
        assert "status:     accepted" in updated.out
        assert "changes:\n" in updated.err
        assert "  spec.every: PT1M -> PT30S\n" in updated.err
        assert "  handler: reports.build -> reports.v2\n" in updated.err
        assert "payload" not in updated.err

        async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

            async def definition() -> dict[str, object] | None:
                body = (await http.get("/v1/schedules/reports")).json()
                found: dict[str, object] = body["definition"]
                return found if found["handler"] == "reports.v2" else None

            after = await assert_eventually(definition, timeout=30, message="the update projected")
        assert after["payload"] == {"region": "eu"}
        assert after["tags"] == ["finance"]
        assert after["retry"]["max_attempts"] == 7  # type: ignore[index]

        nothing = await cli("schedule", "update", "reports")
        assert nothing.code == 2
        assert "nothing to change" in nothing.err


async def test_strict_refuses_a_handler_no_claimer_serves_before_publishing(cli: Cli) -> None:
    refused = await cli(
        "schedule", "create", "typo", "--every", "1m", "--handler", "reprots.build", "--strict"
    )
    assert refused.code == 1, refused
    assert "no live claimer serves handler 'reprots.build'" in refused.err
    assert "nothing was published (--strict)" in refused.err
    assert refused.out == ""


async def test_at_now_plus_two_minutes_names_a_slot_to_the_second(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str, api_url: str
) -> None:
    async with tickers(kafka, pg_dsn):
        created = await cli(
            "schedule", "create", "reminder", "--at", "now+2m", "--handler", "reports.build", "--wait", "30"
        )  # fmt: skip
        assert created.code == 0, created
        async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

            async def slot() -> str | None:
                body = (await http.get("/v1/schedules/reminder")).json()
                slots = body.get("next_slots") or []
                return str(slots[0]["at"]) if slots else None

            at = await assert_eventually(slot, timeout=30, message="the one-shot projected")
    # No fraction of a second: its run id will read reminder@...T11:37:12Z.
    assert "." not in at, at


async def test_runs_list_of_an_unknown_state_is_an_error_not_no_runs(cli: Cli) -> None:
    bogus = await cli("runs", "list", "--job", "payouts", "--state", "bogus")
    assert bogus.code == 1, bogus
    assert (
        "state: must be one of due, running, failed, retrying, held, completed, dead_lettered, skipped"
        in bogus.err
    )
    assert "no runs" not in bogus.out


async def test_pause_and_resume_take_several_schedules_with_one_reason(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str, api_url: str
) -> None:
    async with tickers(kafka, pg_dsn):
        for sid in ("fx.eur", "fx.usd"):
            created = await cli(
                "schedule", "create", sid, "--every", "1h", "--handler", "fx.rates", "--wait", "30"
            )
            assert created.code == 0, created
        paused = await cli(
            "schedule", "pause", "fx.eur", "fx.usd", "--reason", "year-end freeze", "--wait", "30",
            "--command-id", "freeze-1",
        )  # fmt: skip
        assert paused.code == 0, paused
        assert paused.out.count("status:     accepted") == 2
        assert "freeze-1:fx.eur" in paused.out
        assert "freeze-1:fx.usd" in paused.out
        async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:
            rows = (await http.get("/v1/schedules", params={"id_prefix": "fx."})).json()["items"]
            assert [(r["status"], r["pause_reason"]) for r in rows] == [("paused", "year-end freeze")] * 2
            resumed = await cli("schedule", "resume", "fx.eur", "fx.usd", "--wait", "30")
            assert resumed.code == 0, resumed
            rows = (await http.get("/v1/schedules", params={"id_prefix": "fx."})).json()["items"]
            assert [r["status"] for r in rows] == ["active", "active"]
        # One of them unknown: the other is still resumed, the unknown one is reported, exit 1.
        partly = await cli("schedule", "resume", "fx.eur", "fx.gbp", "--wait", "30")
        assert partly.code == 1, partly
        assert "fx.gbp: " in partly.err
