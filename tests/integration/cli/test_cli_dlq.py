"""`slotflow dlq redrive` and `discard` as an operator runs them, against a real DLQ service and api
on the real broker and database: the dry run says what it would touch and publishes nothing, every
spelling of "everything" is refused before anything is sent, the real redrive prints what it did
("redrove N dead letter(s)"), and a selection matching nothing says so and exits non-zero."""

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from slotflow.contracts import ActivityParked, ActivityScheduled, WorkflowStarted, history_event_id, wrap
from slotflow.contracts.topics import SCHEDULE_COMMANDS, WORKFLOW_HISTORY
from slotflow.errors import InvalidPayload
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.api.conftest import AUTH
from tests.integration.cli.conftest import Cli
from tests.integration.dlq.conftest import Running, start_dlq, stop_dlq
from tests.integration.dlq.helpers import origin, park


@pytest.fixture
async def dlq(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_dlq(kafka, pg_dsn)
    yield running
    await stop_dlq(running)


async def test_an_operator_previews_redrives_and_is_told_what_was_done(
    cli: Cli, kafka: KafkaSettings, dlq: Running, api_url: str
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    async with Producer(kafka, client_id="cli-dlq-test") as producer:
        for offset in (1, 2):
            await park(
                producer, kafka, origin(topic, offset, b"{}"), InvalidPayload("x"), reason="unknown_type"
            )
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

        async def listed() -> bool:
            return len((await http.get("/v1/dlq", params={"status": "parked"})).json()["items"]) == 2

        await assert_eventually(listed, timeout=30, message="both letters in the read model")

    preview, everything, since, nothing_preview = await cli.many(
        ["dlq", "redrive", "--topic", topic, "--dry-run"],
        ["dlq", "redrive", "--status", "parked"],
        ["dlq", "discard", "--since", "1970-01-01T00:00:00Z", "--reason", "x"],
        ["dlq", "redrive", "--failure-reason", "no-such-reason", "--dry-run"],
    )
    assert preview.code == 0, preview
    assert "a redrive would touch 2 dead letter(s); nothing was published" in preview.out
    assert "owners asked:" in preview.out
    assert "ticker 2" in preview.out
    assert f"{topic}:1:1" in preview.out  # the first of them, listed
    for refused in (everything, since):
        assert refused.code == 2, refused
        assert "say which dead letters" in refused.err
        assert "alone still means every one" in refused.err
    assert nothing_preview.code == 1, nothing_preview
    assert "no dead letter matches the selection" in nothing_preview.err
    assert await dlq.count("status = 'parked'") == 2  # nothing was sent by any of that

    done = await cli("dlq", "redrive", "--topic", topic, "--wait", "30")
    assert done.code == 0, done
    assert "redrove 2 dead letter(s); 2 asked of their owners (ticker 2); they answer each" in done.out
    nothing = await cli("dlq", "redrive", "--failure-reason", "no-such-reason", "--wait", "30")
    assert nothing.code == 1, nothing
    assert "no dead letter matches the selection" in nothing.err

    async def asked() -> bool:
        return await dlq.count("status = 'redriving' AND redrive_target = 'ticker'") == 2

    await assert_eventually(asked, timeout=30)
    listing = await cli("--json", "dlq", "list", "--status", "redriving")
    assert listing.code == 0, listing
    shown = json.loads(listing.out)["items"]
    assert sorted((item["status"], item["redrive_target"]) for item in shown) == [("redriving", "ticker")] * 2


async def test_workflow_show_says_what_a_parked_workflow_waits_on_and_how_to_retry_it(
    cli: Cli, kafka: KafkaSettings, api_url: str
) -> None:
    wid = "order-99"
    at = datetime.now(UTC)
    events = [
        WorkflowStarted(workflow_id=wid, sequence=1, workflow_type="order", command_id="s-99"),
        ActivityScheduled(
            workflow_id=wid, sequence=2, activity="shipping.book", run_id=f"{wid}/2", on_dead_letter="park"
        ),
        ActivityParked(
            workflow_id=wid,
            sequence=3,
            scheduled_sequence=2,
            reason="attempts_exhausted",
            error_type="CarrierClosed",
        ),
    ]
    async with Producer(kafka, client_id="cli-parked") as producer:
        for event in events:
            envelope = wrap(
                event,
                id=history_event_id(wid, event.sequence),
                key=wid,
                source="orchestrator",
                occurred_at=at,
            )
            await producer.send(kafka.topic(WORKFLOW_HISTORY), envelope)
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

        async def folded() -> bool:
            response = await http.get(f"/v1/workflows/{wid}")
            return response.status_code == 200 and response.json().get("last_sequence") == 3

        await assert_eventually(folded, timeout=30)
    shown = await cli("workflow", "show", wid)
    assert shown.code == 0, shown
    assert "waiting:          activity parked: shipping.book #2 (attempts_exhausted)" in shown.out
    assert f"retry with:       slotflow workflow retry-activity {wid} 2" in shown.out
