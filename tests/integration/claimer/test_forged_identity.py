"""A run's identity is checked, not trusted (issue 24), on the real stack.

A JobDue naming `job_id: attacker` and `run_id: victim@<slot>` used to be claimed: the handler ran
the attacker's payload under the victim's run id, and the victim's real JobDue for the slot was
then collapsed as a duplicate. Published before the real one, it is now parked as
`invalid_payload` with the rule it breaks; the victim's slot runs once with its own payload, and
the api's audit shows the slot fired.

Same file, related: a command whose envelope id holds a NUL is rejected and parked at once, and
the commands behind it are not delayed; `POST /v1/dlq/redrive?wait=` answers once the DLQ service
reports the entry redriven; a claim taken over after its lease lapsed shows `taken_over`.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from pydantic import SecretStr

from slotflow.contracts import CreateSchedule, CronSpec, JobDue, OnceSpec, ScheduleDefinition, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_COMMANDS, SCHEDULE_EVENTS
from slotflow.core.identity import run_id
from slotflow.errors import UndecodableMessage
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import ApiSettings
from slotflow_api.config import Settings as ApiAppSettings
from slotflow_claimer.events import job_due_envelope
from tests.integration.api.conftest import AUTH, TEST_TOKEN
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import job_due, publish, wait_state
from tests.integration.dlq.conftest import Running, start_dlq, stop_dlq
from tests.integration.dlq.helpers import origin, park
from tests.integration.ticker.support import TopicTail, db_now, send, start_ticker, stop_ticker

#: Every state-changing request names its client (the API's CSRF rule, docs/api.md).
CLIENT_HEADERS = {"X-Slotflow-Client": "test", **AUTH}


@pytest.fixture
async def dlq(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_dlq(kafka, pg_dsn)
    yield running
    await stop_dlq(running)


@pytest.fixture
async def api(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = ApiAppSettings(
        api=ApiSettings(
            projector_poll_ms=50, readiness_timeout_seconds=5.0, bootstrap_token=SecretStr(TEST_TOKEN)
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=5),
    )
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api.test", timeout=40, headers=CLIENT_HEADERS
        ) as http:
            yield http


async def test_a_forged_job_due_is_parked_and_the_victims_slot_runs_once_with_its_own_payload(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    dlq: Running,
    api: httpx.AsyncClient,
) -> None:
    calls: list[tuple[str, str, dict[str, Any]]] = []

    async def record(ctx: RunContext) -> str:
        calls.append((ctx.run_id, ctx.job_id, dict(ctx.payload)))
        return "done"

    registry.register("test.record", record)
    await start_claimer()
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=4)
        victim_run = run_id("victim", slot)
        definition = ScheduleDefinition(
            spec=OnceSpec(at=slot), handler="test.record", payload={"who": "victim"}
        )
        await send(producer, kafka, CreateSchedule(schedule_id="victim", definition=definition))
        forged = JobDue(
            run_id=victim_run,
            job_id="attacker",
            slot=slot,
            handler="test.record",
            payload={"who": "attacker"},
        )
        await producer.send(kafka.topic(JOBS_DUE), job_due_envelope(forged, at=datetime.now(UTC)))

        async def forged_parked() -> Any:
            # The api's projector refuses it too; one entry, seen by both.
            row = await dlq.pool.fetchrow(
                "SELECT * FROM dlq.dead_letters WHERE run_id = $1 AND job_id = 'attacker'", victim_run
            )
            return row if row is not None and {"claimer", "api"} <= set(row["seen_by"]) else None

        letter = await assert_eventually(
            forged_parked, timeout=30, message="the claimer and the api's projector parked the forgery"
        )
        assert letter["reason"] == "invalid_payload"
        assert "forged or malformed identity" in letter["error"]
        assert "is not 'attacker@" in letter["error"]

        row = await wait_state(db, victim_run, "completed", timeout=60)
        assert row["job_id"] == "victim"
        assert json.loads(row["payload"]) == {"who": "victim"}
    finally:
        await stop_ticker(ticker)
    assert calls == [(victim_run, "victim", {"who": "victim"})]

    async def audited() -> Any:
        response = await api.get(
            "/v1/audit",
            params={
                "schedule": "victim",
                "from": (slot - timedelta(seconds=1)).isoformat(),
                "to": (slot + timedelta(seconds=1)).isoformat(),
            },
        )
        if response.status_code != 200:
            return None
        body = response.json()
        return body if [s["status"] for s in body["slots"]] == ["fired"] else None

    audit = await assert_eventually(audited, timeout=30, message="the audit shows the slot fired")
    assert audit["slots"][0]["run_id"] == victim_run
    assert audit["summary"]["fired"] == 1
    # The read model holds the victim's run under its own job, not the forgery's.
    projected = (await api.get(f"/v1/runs/{quote(victim_run, safe='')}")).json()
    assert projected["job_id"] == "victim"


async def test_a_nul_in_a_command_id_is_rejected_and_parked_at_once(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, dlq: Running
) -> None:
    definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    bad = wrap(
        CreateSchedule(schedule_id="nul", definition=definition),
        id="cmd\x00nul",
        key="nul",
        source="probe",
        occurred_at=datetime.now(UTC),
    )
    async with TopicTail(kafka, (SCHEDULE_EVENTS,)) as tail:
        ticker = await start_ticker(kafka, pg_dsn)
        try:
            sent = time.monotonic()
            await producer.send_raw(
                kafka.topic(SCHEDULE_COMMANDS), key=b"nul", value=encode(bad), headers=envelope_headers(bad)
            )
            good = await send(producer, kafka, CreateSchedule(schedule_id="behind", definition=definition))
            await tail.wait_for(lambda t: bool(t.by_id(f"{good}/accepted")), message="the command behind")
            # Not held back by retries of the refused insert (ten tries with back-off before).
            assert time.monotonic() - sent < 5.0
            [rejected] = tail.of_type("command.rejected")
            assert rejected.data["command_id"] == "cmd\ufffdnul"
            assert "invalid_payload" in rejected.data["reason"]

            async def parked() -> Any:
                return await dlq.pool.fetchval(
                    "SELECT reason FROM dlq.dead_letters WHERE topic = $1", kafka.topic(SCHEDULE_COMMANDS)
                )

            assert await assert_eventually(parked, timeout=30, message="parked") == "invalid_payload"
            await asyncio.sleep(0)
            assert not ticker.task.done()
        finally:
            await stop_ticker(ticker)


async def test_redrive_with_wait_answers_once_the_dlq_reports_the_entry_asked_of_its_owner(
    kafka: KafkaSettings, producer: Producer, dlq: Running, api: httpx.AsyncClient
) -> None:
    record = origin(kafka.topic(JOBS_DUE), 7, b"not json", key=b"k")
    await park(producer, kafka, record, UndecodableMessage("not json"), source="claimer")
    entry = record.position

    async def listed() -> bool:
        response = await api.get(f"/v1/dlq/{entry}")
        return response.status_code == 200 and response.json()["status"] == "parked"

    await assert_eventually(listed, timeout=30, message="the entry in the read model")
    response = await api.post("/v1/dlq/redrive", params={"wait": 20}, json={"selection": {"ids": [entry]}})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "accepted"  # not `published`: the DLQ service answered
    # What it did, as the dlq said it: the letter's owner (the claimer, which consumes jobs.due) asked.
    assert response.json()["summary"].startswith(
        "redrove 1 dead letter(s); 1 asked of their owners (claimer 1)"
    )
    # Read-your-writes: the entry is asked of its owner in the read model by the time the answer
    # came (no claimer runs here, so it stays `redriving`: never `redriven` before an owner did it).
    shown = (await api.get(f"/v1/dlq/{entry}")).json()
    assert (shown["status"], shown["redrive_target"]) == ("redriving", "claimer")


async def test_a_taken_over_attempt_shows_its_outcome(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    async def stuck_first(ctx: RunContext) -> str:
        if ctx.fence_token == 1:
            await asyncio.Event().wait()  # the first claimer dies in here
        return "done"

    registry.register("test.stuck_first", stuck_first)
    first = await start_claimer(lease_ttl_seconds=1.0, commit_interval_seconds=60)
    job = job_due("taken", handler="test.stuck_first")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    await first.kill()
    await start_claimer(lease_ttl_seconds=1.0, reaper_interval_seconds=0.5)
    await wait_state(db, job.run_id, "completed", timeout=30)

    async def shown() -> Any:
        response = await api.get(f"/v1/runs/{job.run_id}")
        if response.status_code != 200 or response.json()["state"] != "completed":
            return None
        attempts = response.json()["attempts"]
        return attempts if len(attempts) == 2 else None

    attempts = await assert_eventually(shown, timeout=30, message="both claims in the read model")
    assert [(a["fence_token"], a["outcome"]) for a in attempts] == [(1, "taken_over"), (2, "completed")]
