"""A client that is not ours: kcat publishes a CreateSchedule JSON envelope to the command topic;
with a real ticker and claimer running, the schedule's runs then appear in the API."""

import asyncio
import json
import shutil
from datetime import datetime
from typing import Any

import httpx
import pytest

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.core.identity import run_id
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from tests.integration.api.helpers import eventually_json, read_topic
from tests.integration.claimer.support import settings_for
from tests.integration.ticker.support import tickers

ENVELOPE = {
    "type": "schedule.create",
    "version": 1,
    "id": "kcat-create-nightly-1",
    "key": "kcat.nightly",
    "occurred_at": "2026-12-02T10:00:00Z",
    "source": "kcat",
    "data": {
        "schedule_id": "kcat.nightly",
        "definition": {
            "spec": {"kind": "cron", "expression": "*/1 * * * * *", "timezone": "UTC"},
            "handler": "reports.build",
        },
    },
}


async def kcat_produce(kafka: KafkaSettings, topic: str, key: str, value: str) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.fail("kcat is not installed: run deploy/devstack/install-tools.sh")
    process = await asyncio.create_subprocess_exec(
        kcat,
        "-b",
        kafka.bootstrap,
        "-t",
        topic,
        "-P",
        "-k",
        key,
        "-H",
        "slotflow-type=schedule.create",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(value.encode()), timeout=30)
    assert process.returncode == 0, err.decode()


async def test_kcat_command_is_seen_by_the_api(client: httpx.AsyncClient, kafka: KafkaSettings) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    await kcat_produce(kafka, topic, "kcat.nightly", json.dumps(ENVELOPE))
    (envelope,) = await read_topic(kafka, SCHEDULE_COMMANDS, want=1)
    assert envelope.id == "kcat-create-nightly-1"
    status = await eventually_json(
        client, "/v1/commands/kcat-create-nightly-1", lambda b: b["status"] != "unknown"
    )
    # The api saw a well-formed schedule command from a foreign client; the ticker acknowledges it.
    assert status["status"] == "pending"
    assert status["command_type"] == "schedule.create"
    assert status["subject"] == "kcat.nightly"


TICK = "kcat.every-second"

TICK_ENVELOPE = {
    "type": "schedule.create",
    "version": 1,
    "id": "kcat-create-tick-1",
    "key": TICK,
    "occurred_at": "2026-12-02T10:00:00Z",
    "source": "kcat",
    "data": {
        "schedule_id": TICK,
        "definition": {
            "spec": {"kind": "cron", "expression": "* * * * * *", "timezone": "UTC"},
            "handler": "kcat.tick",
        },
    },
}


async def test_kcat_created_schedule_fires_and_its_completed_runs_appear_in_the_api(
    client: httpx.AsyncClient, kafka: KafkaSettings, pg_dsn: str
) -> None:
    executed: list[str] = []

    async def tick(ctx: RunContext) -> object:
        executed.append(ctx.run_id)
        return {"slot": ctx.slot.isoformat()}

    registry = HandlerRegistry()
    registry.register("kcat.tick", tick)
    async with tickers(kafka, pg_dsn), ClaimerService(settings_for(kafka, pg_dsn), registry=registry):
        await kcat_produce(kafka, kafka.topic(SCHEDULE_COMMANDS), TICK, json.dumps(TICK_ENVELOPE))
        status = await eventually_json(
            client,
            "/v1/commands/kcat-create-tick-1",
            lambda b: b["status"] != "pending" and b["status"] != "unknown",
        )
        assert status["status"] == "accepted", status
        schedule = await eventually_json(client, f"/v1/schedules/{TICK}", lambda b: True)
        assert schedule["handler"] == "kcat.tick"
        assert schedule["spec"]["expression"] == "* * * * * *"
        assert schedule["paused"] is False

        seen: list[Any] = []

        async def two_completed() -> list[dict[str, Any]]:
            response = await client.get(f"/v1/schedules/{TICK}/runs", params={"state": "completed"})
            seen[:] = [response.status_code, response.json()]
            items: list[dict[str, Any]] = response.json()["items"] if response.status_code == 200 else []
            return items if len(items) >= 2 else []

        try:
            runs: list[dict[str, Any]] = await assert_eventually(
                two_completed, timeout=45, interval=0.25, message="two completed runs projected"
            )
        except AssertionError as err:
            raise AssertionError(f"runs of {TICK}: last answer {seen}; handler ran {executed}") from err

    for run in runs:
        assert run["run_id"] == run_id(TICK, datetime.fromisoformat(run["slot"]))
        assert run["job_id"] == TICK
        assert run["handler"] == "kcat.tick"
        assert run["fence_token"] == 1
        assert run["result"] == {"slot": datetime.fromisoformat(run["slot"]).isoformat()}
        assert run["run_id"] in executed
    assert len({run["slot"] for run in runs}) == len(runs)
