"""NUL characters: refused at the edge in a person's words, and parked at once where a record
already on a topic carries one (PostgreSQL's text and jsonb cannot hold it).

Before: the api accepted a NUL payload, the projector took PostgreSQL's refusal for a transient
failure and retried the batch 20 times (80-130 s) before parking it, projecting nothing meanwhile;
a NUL in a query filter answered with PostgreSQL's own message.
"""

import logging
import time
from datetime import UTC, datetime

import httpx
import pytest

from slotflow.contracts import ScheduleCreated
from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_EVENTS
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import cron, read_topic

DEFINITION = {"spec": {"kind": "cron", "expression": "*/5 * * * *"}, "handler": "h.x"}


async def test_a_nul_in_a_command_is_refused_with_422_naming_the_field(client: httpx.AsyncClient) -> None:
    payload = await client.post(
        "/v1/schedules",
        json={"schedule_id": "nul-payload", "definition": {**DEFINITION, "payload": {"note": "a\x00b"}}},
    )
    assert payload.status_code == 422
    assert payload.json()["detail"].startswith("definition.payload.note: contains a NUL character")
    tags = await client.post(
        "/v1/schedules",
        json={"schedule_id": "nul-tags", "definition": {**DEFINITION, "tags": ["ok", "b\x00d"]}},
    )
    assert tags.status_code == 422
    assert "definition.tags.1: contains a NUL character" in tags.json()["detail"]
    key = await client.post(
        "/v1/schedules",
        json={"schedule_id": "nul-key", "definition": {**DEFINITION, "payload": {"k\x00": 1}}},
    )
    assert key.status_code == 422
    assert "definition.payload.k\\x00: contains a NUL character" in key.json()["detail"]
    fine = await client.post("/v1/schedules", json={"schedule_id": "fine", "definition": DEFINITION})
    assert fine.status_code == 202


async def test_a_nul_in_a_query_filter_is_refused_in_words(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/runs", params={"job_id": "a\x00b"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail.startswith("query parameter 'job_id': contains a NUL character")
    assert "0x00" not in detail  # not PostgreSQL's words
    path = await client.get("/v1/schedules/a%00b")
    assert path.status_code == 422
    assert "NUL character" in path.json()["detail"]


async def test_a_nul_record_is_parked_at_once_and_the_records_behind_it_project(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="slotflow_api.projector")
    now = datetime.now(UTC)
    # Built without validation: the model refuses a NUL (the acceptance rule); another producer
    # may still write one.
    poisoned = ScheduleCreated.model_construct(
        schedule_id="nul-event",
        definition=cron().model_copy(update={"payload": {"note": "a\x00b"}}),
        paused=False,
        next_fire_at=now,
    )
    behind = [
        ScheduleCreated(schedule_id=f"behind-{i}", definition=cron(), paused=False, next_fire_at=now)
        for i in range(3)
    ]
    sent = time.monotonic()
    # One key, one partition: the good records really are behind the bad one.
    await emit(SCHEDULE_EVENTS, poisoned, id="nul-event/created", key="same")
    for i, message in enumerate(behind):
        await emit(SCHEDULE_EVENTS, message, id=f"behind-{i}/created", key="same")

    async def all_projected() -> bool:
        for i in range(3):
            if (await client.get(f"/v1/schedules/behind-{i}")).status_code != 200:
                return False
        return True

    await assert_eventually(all_projected, timeout=30, interval=0.05, message="records behind projected")
    elapsed = time.monotonic() - sent
    # "At once": the batch was never retried as if the failure were transient (it used to be, 20
    # times, 80-130 s). The wall-clock bound is loose for a loaded CI box; quiet, it is ~0.3 s.
    retries = [r.getMessage() for r in caplog.records if "projection batch failed (try" in r.getMessage()]
    assert retries == []
    assert elapsed < 5.0, f"the records behind the NUL one took {elapsed:.2f} s"
    (letter,) = await read_topic(kafka, DLQ_MESSAGES, want=1)
    # Refused at decode, naming the field, as every other consumer refuses it (before the rule:
    # `permanent_error`, PostgreSQL's UntranslatableCharacterError on the insert).
    assert letter.data["reason"] == "invalid_payload"
    assert letter.data["source_service"] == "api"
    assert "definition.payload.note: contains a NUL character" in letter.data["error"]
