"""`slotflow downstream ...` as a subprocess against the api and a claimer on the real stack.

The open and close commands go through Kafka to the claimer, which answers them; `--wait` reads
the answer through the api. The views print what the claimer reported. Bad input exits 2 with a
message, a rejected command 1.
"""

import json
from collections.abc import AsyncIterator

import pytest

from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from tests.integration.claimer.support import settings_for
from tests.integration.cli.conftest import Cli


@pytest.fixture
async def claimer(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[ClaimerService]:
    service = ClaimerService(
        settings_for(kafka, pg_dsn, downstream_report_interval_seconds=0.5), registry=HandlerRegistry()
    )
    await service.start()
    yield service
    await service.stop(grace=0.5)


async def test_downstream_commands_and_views(cli: Cli, claimer: ClaimerService) -> None:
    opened = await cli("downstream", "open", "bank-api", "--reason", "maintenance INC-7", "--wait", "20")
    assert opened.code == 0, opened.err
    assert "accepted" in opened.out

    async def listed() -> str | None:
        shown = await cli("downstream", "list")
        return shown.out if shown.code == 0 and "open (operator)" in shown.out else None

    table = await assert_eventually(listed, timeout=30.0, message="the open downstream was not listed")
    assert "bank-api" in table

    shown = await cli("downstream", "show", "bank-api", "--json")
    assert shown.code == 0, shown.err
    body = json.loads(shown.out)
    assert body["state"] == "open"
    assert [c["cause"] for c in body["changes"]] == ["operator_open"]
    assert body["changes"][0]["reason"] == "maintenance INC-7"

    configured = await cli("downstream", "configure", "bank-api", "--cooldown-seconds", "45", "--wait", "20")
    assert configured.code == 0, configured.err
    closed = await cli("downstream", "close", "bank-api", "--reason", "bank is back", "--wait", "20")
    assert closed.code == 0, closed.err

    async def closed_shown() -> str | None:
        shown = await cli("downstream", "show", "bank-api")
        return shown.out if "operator_close" in shown.out else None

    detail = await assert_eventually(closed_shown, timeout=30.0, message="the close was not shown")
    assert "configured" in detail

    bad = await cli("downstream", "configure", "bank-api", "--failure-rate", "3")
    assert bad.code == 2
    assert "failure_rate" in bad.err
    rejected = await cli("downstream", "close", "no-such-api", "--reason", "tidy", "--wait", "20")
    assert rejected.code == 1
    assert "no downstream named 'no-such-api'" in rejected.err
    missing = await cli("downstream", "show", "no-such-api")
    assert missing.code == 1
    assert "not found" in missing.err
