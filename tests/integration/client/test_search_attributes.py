"""Memo and search attributes end to end, as processes on the real Kafka and PostgreSQL: a workflow
started by the client with a memo and typed attributes, its code upserting them (recorded in the
history, projected by the api), listed by a query through the client and the api; a bad query is
the api's 400 (the client's `InvalidRequest`); a start with a bad attribute is refused before it is
sent; the CLI's `--search-attribute` and `workflow list --query` reach the same.
"""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from slotflow.client import Client, HttpTransport, InvalidRequest
from slotflow.contracts.topics import DLQ_MESSAGES, WORKFLOW_COMMANDS
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env
from tests.integration.api.helpers import read_topic
from tests.integration.cli.conftest import SCRIPT, Cli
from tests.integration.client.conftest import ADMIN_TOKEN

REPO = Path(__file__).parents[3]
PROMISED = datetime(2026, 12, 24, 18, tzinfo=UTC)
RESULT_WITHIN = 120.0


@pytest.fixture
def processes() -> Iterator[ProcessGroup]:
    group = ProcessGroup()
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
async def api_url(kafka: KafkaSettings, pg_dsn: str, tmp_path: Path, processes: ProcessGroup) -> str:
    """The orchestrator serving the tagged workflow (no activities, no timers: nothing else needed)
    and the api, each its own process."""
    port = free_port()
    env = stack_env(
        kafka,
        pg_dsn,
        "SLOTFLOW_ORCHESTRATOR_",
        metrics_port=port,
        workflow_modules="tests.integration.client.tagged_workflow",
    ) | {"PYTHONPATH": str(REPO)}
    await processes.start(
        ServiceProcess(
            "slotflow_orchestrator", "orchestrator", env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port
        )
    )
    api_port = free_port()
    api_env = stack_env(
        kafka, pg_dsn, "SLOTFLOW_API_", port=api_port, bootstrap_token=ADMIN_TOKEN, projector_poll_ms=50
    )
    await processes.start(
        ServiceProcess("slotflow_api", "api", env=api_env, log_dir=tmp_path, cwd=REPO, metrics_port=api_port)
    )
    return f"http://127.0.0.1:{api_port}"


async def listed(client: Client, query: str) -> list[str]:
    page = await client.list_workflows(query=query, limit=100)
    return sorted(w.workflow_id for w in page.items)


async def test_start_upsert_and_list_by_query(api_url: str) -> None:
    async with Client(HttpTransport(api_url, token=ADMIN_TOKEN)) as client:
        tagged = await client.start_workflow(
            "tests.tagged_order",
            {"order": 1},
            id="tagged-1",
            memo={"note": "gift wrap"},
            search_attributes={
                "Customer": "acme",
                "AmountCents": 12999,
                "PromisedBy": PROMISED,
                "Coupon": "X",
            },
            wait=30,
        )
        await client.start_workflow(
            "tests.tagged_order",
            {"order": 2},
            id="tagged-2",
            search_attributes={"Customer": "globex", "AmountCents": 500},
            wait=30,
        )

        # The code's first upsert is in the history and the read model: Stage set, Coupon gone.
        async def paid() -> bool:
            return await listed(client, "Stage = 'paid'") == ["tagged-1", "tagged-2"]

        await assert_eventually(paid, timeout=60, message="both workflows listed as Stage = 'paid'")
        shown = await tagged.describe()
        assert shown.memo == {"note": "gift wrap"}
        assert shown.search_attributes == {
            "Customer": "acme",
            "AmountCents": 12999,
            "PromisedBy": PROMISED,
            "Stage": "paid",
        }
        assert await listed(client, "Customer = 'acme' AND AmountCents > 10000") == ["tagged-1"]
        assert await listed(client, "Coupon IS NOT NULL") == []
        assert await listed(
            client, "PromisedBy < '2026-12-25T00:00:00Z' AND ExecutionStatus = 'Running'"
        ) == ["tagged-1"]

        # The second upsert, after a signal; the run completes.
        await tagged.signal("ship", {"parcels": 3, "tracking": "JD0146"}, wait=30)
        result = await tagged.result(timeout=RESULT_WITHIN, poll_interval=0.3)
        assert result == {
            "memo": {"note": "gift wrap", "tracking": "JD0146"},
            "attributes": ["AmountCents", "Customer", "Parcels", "PromisedBy", "Stage"],
        }

        async def shipped() -> bool:
            return await listed(client, "Stage = 'shipped' AND Parcels = 3") == ["tagged-1"]

        await assert_eventually(shipped, timeout=60, message="tagged-1 listed as shipped")
        assert await listed(client, "ExecutionStatus = 'Completed' AND Customer IN ('acme', 'globex')") == [
            "tagged-1"
        ]
        history = await client.get_workflow("tagged-1")
        assert history.typed_search_attributes["Parcels"].type == "int"
        # The memo as the code's upsert left it (shown, never searched).
        assert history.memo == {"note": "gift wrap", "tracking": "JD0146"}

        # A bad query: the api's 400 names where, the client raises it.
        with pytest.raises(InvalidRequest, match="at 12: expected a value"):
            await client.list_workflows(query="Customer = ")
        # A bad attribute is refused before anything is sent.
        with pytest.raises(InvalidRequest, match="built-in field"):
            await client.start_workflow(
                "tests.tagged_order", {}, id="tagged-3", search_attributes={"WorkflowId": "x"}
            )

    async with httpx.AsyncClient(
        base_url=api_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ) as http:
        raw = await http.get("/v1/workflows", params={"query": "Stage = 'shipped' OR"})
        assert raw.status_code == 400
        assert raw.json()["detail"] == "query: at 21: expected a field name, found the end of the query"


async def test_the_cli_starts_tagged_and_lists_by_query(api_url: str, kafka: KafkaSettings) -> None:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: run `make setup`"
    cli = Cli(kafka, api_url)
    env = cli.env(SLOTFLOW_TOKEN=ADMIN_TOKEN)
    started = await cli(
        "workflow",
        "start",
        "tagged-cli",
        "--type",
        "tests.tagged_order",
        "--memo",
        '{"note": "from the cli"}',
        "--search-attribute",
        "Customer=initech",
        "--search-attribute",
        "AmountCents=42",
        "--search-attribute",
        'PromisedBy={"type": "datetime", "value": "2026-12-24T18:00:00Z"}',
        "--wait",
        "30",
        env=env,
    )
    assert started.code == 0, started.err

    async def listed() -> bool:
        out = await cli(
            "--json", "workflow", "list", "--query", "Customer = 'initech' AND Stage = 'paid'", env=env
        )
        assert out.code == 0, out.err
        return [w["workflow_id"] for w in json.loads(out.out)["items"]] == ["tagged-cli"]

    await assert_eventually(listed, timeout=60, message="the CLI lists tagged-cli by its attributes")
    shown = await cli("workflow", "show", "tagged-cli", env=env)
    assert shown.code == 0, shown.err
    assert '{"note":"from the cli"}' in shown.out
    assert "search AmountCents" in shown.out
    bad = await cli("workflow", "list", "--query", "AmountCents >", env=env)
    assert bad.code == 1, (bad.out, bad.err)
    assert "at 14: expected a value" in bad.err
    refused = await cli(
        "workflow",
        "start",
        "tagged-bad",
        "--type",
        "tests.tagged_order",
        "--search-attribute",
        "and=1",
        env=env,
    )
    assert refused.code == 2
    assert "word of the query language" in refused.err


async def test_a_start_on_the_topic_with_a_bad_attribute_is_parked_with_the_reason(
    api_url: str, kafka: KafkaSettings
) -> None:
    # Not through the client or the api (both refuse it before sending): straight onto the topic.
    envelope = {
        "type": "workflow.start",
        "version": 1,
        "id": "bad-attribute-start",
        "key": "tagged-bad",
        "occurred_at": datetime.now(UTC).isoformat(),
        "source": "test",
        "data": {
            "workflow_id": "tagged-bad",
            "workflow_type": "tests.tagged_order",
            "search_attributes": {"ExecutionStatus": {"type": "keyword", "value": "Running"}},
        },
    }
    async with Producer(kafka, client_id="search-attributes-test") as producer:
        await producer.send_raw(
            kafka.topic(WORKFLOW_COMMANDS), key=b"tagged-bad", value=json.dumps(envelope).encode()
        )
    letters = await read_topic(kafka, DLQ_MESSAGES, want=1, timeout=60)
    parked = [letter.data for letter in letters if letter.data.get("key") == "tagged-bad"]
    assert parked, letters
    assert {p["reason"] for p in parked} == {"invalid_payload"}
    assert all("built-in field" in p["error"] for p in parked), parked
