"""`slotflow schedule backfill --dry-run` lists the runs it would create and publishes nothing."""

import json

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.settings import KafkaSettings
from tests.integration.api.helpers import read_topic
from tests.integration.cli.conftest import Cli
from tests.integration.ticker.support import tickers


async def test_a_dry_run_lists_the_slots_and_publishes_nothing(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str
) -> None:
    async with tickers(kafka, pg_dsn):
        created = await cli(
            "schedule", "create", "nightly", "--cron", "0 2 * * *", "--handler", "h.x", "--wait", "30"
        )
        assert created.code == 0, created
        window = ["--start", "2026-01-01T00:00:00Z", "--end", "2026-01-04T00:00:00Z"]
        dry = await cli("schedule", "backfill", "nightly", *window, "--dry-run")
        assert dry.code == 0, dry
        assert "creates 3 run(s) (overlap buffer_all, 1 at a time); nothing was published" in dry.out
        assert [line.strip() for line in dry.out.splitlines()[1:]] == [
            "nightly@2026-01-01T02:00:00Z",
            "nightly@2026-01-02T02:00:00Z",
            "nightly@2026-01-03T02:00:00Z",
        ]
        as_json = json.loads(
            (await cli("--json", "schedule", "backfill", "nightly", *window, "--dry-run")).out
        )
        assert (as_json["expected"], as_json["refused"]) == (3, None)

        too_many = await cli("schedule", "backfill", "nightly", *window, "--max-slots", "2", "--dry-run")
        assert too_many.code == 1
        assert "the ticker would refuse this backfill: more than max_slots=2 slots" in too_many.err
        # Only the create reached the command topic.
        published = await read_topic(kafka, SCHEDULE_COMMANDS, want=1)
        assert [e.type for e in published] == ["schedule.create"]
