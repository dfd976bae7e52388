"""The findings end to end on the real broker: a command another producer writes with what some
service cannot store is refused by every consumer, and the sender is told why.

Before the acceptance rule: a CreateSchedule whose payload held a NUL, written straight to the
commands topic (as kcat or any client does), was accepted by the ticker and fired every second,
while the api could not store its ScheduleCreated (PostgreSQL's jsonb refuses `\\u0000`), parked
it, and showed the schedule nowhere: 404, in no list, in no audit. A workflow started with a NUL
input ran in the orchestrator while the api parked its start the same way.
"""

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from slotflow.contracts import CreateSchedule, CronSpec, ScheduleDefinition, StartWorkflow, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import (
    DLQ_MESSAGES,
    JOBS_DUE,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
)
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from slotflow_orchestrator.workflow_code import load_workflow_code
from tests.integration.acceptance.cases import AT
from tests.integration.orchestrator.support import Running, orchestrator_settings, start_orchestrator
from tests.integration.ticker.support import Replica, tickers

EVERY_SECOND = CronSpec(expression="* * * * * *")


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="acceptance-feed") as started:
        yield started


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    async with tickers(kafka, pg_dsn) as (replica,):
        yield replica


@pytest.fixture
async def orchestrator(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_orchestrator(
        orchestrator_settings(kafka, pg_dsn), load_workflow_code(["tests.integration.acceptance.flows"])
    )
    yield running
    await running.stop()


def with_value(envelope_bytes: bytes, path: tuple[str, ...], value: object) -> bytes:
    """The record a producer that does not validate writes: ``value`` at ``path`` in the data."""
    raw = json.loads(envelope_bytes)
    target = raw["data"]
    for name in path[:-1]:
        target = target[name]
    target[path[-1]] = value
    return json.dumps(raw, allow_nan=True).encode()


async def test_a_schedule_command_some_service_cannot_store_is_rejected_naming_the_field_and_never_fires(
    ticker: Replica, client: httpx.AsyncClient, producer: Producer, kafka: KafkaSettings
) -> None:
    definition = ScheduleDefinition(spec=EVERY_SECOND, handler="acceptance.pay")
    cases = {
        "nul-payload": (
            ("definition", "payload"),
            {"note": "a\x00b"},
            "definition.payload.note: contains a NUL",
        ),
        "nan-payload": (
            ("definition", "payload"),
            {"amount": float("nan")},
            "definition.payload.amount: holds nan",
        ),
        "nul-tag": (("definition", "tags"), ["b\x00d"], "definition.tags.0: contains a NUL"),
    }
    async with TopicTail(kafka, [SCHEDULE_EVENTS, JOBS_DUE, DLQ_MESSAGES]) as tail:
        for schedule_id, (path, value, _) in cases.items():
            good = wrap(
                CreateSchedule(schedule_id=schedule_id, definition=definition),
                id=f"cmd-{schedule_id}",
                key=schedule_id,
                source="kcat",
                occurred_at=AT,
            )
            await producer.send_raw(
                kafka.topic(SCHEDULE_COMMANDS),
                key=schedule_id.encode(),
                value=with_value(encode(good), path, value),
            )
        await tail.wait_for(
            lambda t: all(t.by_id(f"cmd-{s}/rejected") for s in cases), message="a CommandRejected for each"
        )
        # The dead letter is written by its own producer, so it may land after the rejection.
        await tail.wait_for(
            lambda t: {e.data["key"] for e in t.of_type("dlq.dead_lettered")} >= set(cases),
            message="a dead letter for each",
        )
        for schedule_id, (_, _, words) in cases.items():
            (rejected,) = tail.by_id(f"cmd-{schedule_id}/rejected")
            assert rejected.data["reason"].startswith("invalid_payload: ")
            assert words in rejected.data["reason"]
        letters = {e.data["key"]: e.data for e in tail.of_type("dlq.dead_lettered")}
        assert set(letters) == set(cases)
        assert all(letter["reason"] == "invalid_payload" for letter in letters.values())
        # An every-second schedule would have fired by now, had it been taken.
        await asyncio.sleep(3)
        assert [e for e in tail.of_type("job.due") if e.key in cases] == []
        assert [e for e in tail.of_type("schedule.created") if e.key in cases] == []

    # The api tells whoever sent it: the command is rejected with the same reason.
    for schedule_id, (_, _, words) in cases.items():

        async def answered(command_id: str = f"cmd-{schedule_id}", expected: str = words) -> bool:
            status = (await client.get(f"/v1/commands/{command_id}")).json()
            return status["status"] == "rejected" and expected in (status["reason"] or "")

        await assert_eventually(answered, timeout=30, message=f"cmd-{schedule_id} rejected in the api")


async def test_a_workflow_start_some_service_cannot_store_is_parked_by_every_consumer_naming_the_field(
    orchestrator: Running, client: httpx.AsyncClient, producer: Producer, kafka: KafkaSettings
) -> None:
    start = wrap(
        StartWorkflow(workflow_id="nul-input", workflow_type="acceptance.carry", input={}),
        id="start-nul-input",
        key="nul-input",
        source="kcat",
        occurred_at=AT,
    )
    value = with_value(encode(start), ("input",), {"note": "a\x00b"})
    async with TopicTail(kafka, [DLQ_MESSAGES, WORKFLOW_HISTORY]) as tail:
        await producer.send_raw(kafka.topic(WORKFLOW_COMMANDS), key=b"nul-input", value=value)
        # The orchestrator and the api's projector each park it with the reason.
        await tail.wait_for(
            lambda t: (
                {e.data["source_service"] for e in t.of_type("dlq.dead_lettered")} >= {"orchestrator", "api"}
            ),
            message="the orchestrator's and the api's letters",
        )
        for letter in tail.of_type("dlq.dead_lettered"):
            assert letter.data["reason"] == "invalid_payload"
            assert "input.note: contains a NUL character" in letter.data["error"]
        await asyncio.sleep(1)
        assert [e for e in tail.of_type("workflow.started") if e.key == "nul-input"] == []
    assert (await client.get("/v1/workflows/nul-input")).status_code == 404
