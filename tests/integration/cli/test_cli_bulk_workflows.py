"""`slotflow workflow cancel|terminate` with a selection, against the real api on the real broker and
database: the dry run says what it would take and leave out and publishes nothing, a selection
that does not narrow is refused with the api's reason (exit 1), no reason is a usage error (exit
2), and the real call prints how many workflows it sent a command to."""

from datetime import UTC, datetime

import httpx

from slotflow.contracts import HistoryEvent, WorkflowCompleted, WorkflowStarted, history_event_id, wrap
from slotflow.contracts.topics import WORKFLOW_COMMANDS, WORKFLOW_HISTORY
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from tests.integration.api.conftest import AUTH
from tests.integration.cli.conftest import Cli

OPEN = ("order-1041", "order-1042")
CLOSED = "order-1040"


async def test_an_operator_previews_and_cancels_every_running_workflow_of_a_type(
    cli: Cli, kafka: KafkaSettings, api_url: str
) -> None:
    histories: dict[str, list[HistoryEvent]] = {
        w: [WorkflowStarted(workflow_id=w, sequence=1, workflow_type="orders.checkout", command_id=f"s-{w}")]
        for w in (*OPEN, CLOSED)
    }
    histories[CLOSED].append(WorkflowCompleted(workflow_id=CLOSED, sequence=2, result={}))
    async with Producer(kafka, client_id="cli-bulk-test") as producer:
        for workflow_id, events in histories.items():
            for event in events:
                envelope = wrap(
                    event,
                    id=history_event_id(workflow_id, event.sequence),
                    key=workflow_id,
                    source="orchestrator",
                    occurred_at=datetime.now(UTC),
                )
                await producer.send(kafka.topic(WORKFLOW_HISTORY), envelope)
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH) as http:

        async def projected() -> bool:
            items = (await http.get("/v1/workflows", params={"type": "orders.checkout"})).json()["items"]
            return sorted(w["status"] for w in items) == ["completed", "running", "running"]

        await assert_eventually(projected, timeout=30, message="the three workflows in the read model")

    async with TopicTail(kafka, (WORKFLOW_COMMANDS,)) as commands:
        preview, everything, no_reason = await cli.many(
            ["workflow", "cancel", "--type", "orders.checkout", "--reason", "outage", "--dry-run"],
            ["workflow", "cancel", "--status", "running", "--reason", "outage"],
            ["workflow", "terminate", "--type", "orders.checkout"],
        )
        assert preview.code == 0, preview
        assert "a cancel would take 2 workflow(s); nothing was published" in preview.out
        assert "1: closed (completed): a workflow that ended takes no cancel" in preview.out
        assert all(w in preview.out for w in OPEN)
        assert "left out (the first of them):" in preview.out
        assert CLOSED in preview.out
        assert everything.code == 1, everything
        assert '"all": true' in everything.err
        assert no_reason.code == 2, no_reason
        assert "--reason is required" in no_reason.err

        done = await cli(
            "workflow", "cancel", "--type", "orders.checkout", "--status", "running", "--reason", "outage"
        )
        assert done.code == 0, done
        assert "cancel sent to 2 workflow(s), one command each" in done.out
        await assert_eventually(
            lambda: len(commands.seen_envelopes()) >= 2, timeout=30, message="two cancels"
        )
        assert sorted(e.key for e in commands.seen_envelopes()) == sorted(OPEN)
        assert {e.type for e in commands.seen_envelopes()} == {"workflow.cancel"}
