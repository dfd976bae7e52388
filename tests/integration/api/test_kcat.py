"""A client that is not ours: kcat publishes a CreateSchedule JSON envelope to the command topic."""

import asyncio
import json
import shutil

import httpx
import pytest

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.settings import KafkaSettings
from tests.integration.api.helpers import eventually_json, read_topic

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
