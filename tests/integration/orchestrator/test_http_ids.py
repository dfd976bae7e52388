"""Every workflow id the orchestrator accepts is reachable over HTTP, `/` included, children's
default ids (`{parent}/child/{sequence}`) first of all: read, history, signal, cancel and
terminate, through the real api served by uvicorn (which decodes `%2F` before routing), escaped
or not, and through the Python HTTP client and the CLI.

Before: `order/eu/1` was started, and then every route answered 404 {"detail": "Not Found"},
`%2F` or not, so no child started with the default id could be read, signalled, cancelled or
terminated over HTTP.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from slotflow.client import Client, HttpTransport
from slotflow.settings import KafkaSettings
from slotflow.workflow.children import default_child_id
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import CLIENT_HEADERS, TEST_TOKEN, api_settings  # noqa: F401 - fixture
from tests.integration.cli.conftest import Cli
from tests.integration.cli.support import served
from tests.integration.orchestrator.conftest import StartOrchestrator
from tests.integration.orchestrator.support import Workflows


@pytest.fixture
async def api_url(api_settings: Settings) -> AsyncIterator[str]:  # noqa: F811 - the api's settings
    async with served(create_app(api_settings)) as url:
        yield url


@pytest.fixture
async def http(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, headers=CLIENT_HEADERS, timeout=40) as client:
        yield client


def one_segment(workflow_id: str) -> str:
    return quote(workflow_id, safe="")


async def eventually(http: httpx.AsyncClient, path: str, check: Any) -> dict[str, Any]:
    """GET ``path`` until its body satisfies ``check``."""
    last: list[Any] = []
    for _ in range(300):
        response = await http.get(path)
        last[:] = [response.status_code, response.text[:300]]
        if response.status_code == 200 and check(response.json()):
            return dict(response.json())
        await _pause()
    raise AssertionError(f"{path}: last answer {last}")


async def _pause() -> None:
    await asyncio.sleep(0.1)


async def start(http: httpx.AsyncClient, workflow_id: str, workflow_type: str) -> None:
    body = {"workflow_id": workflow_id, "workflow_type": workflow_type, "input": {"order": workflow_id}}
    started = await http.post("/v1/workflows", json=body, params={"wait": 30})
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "accepted"


async def default_child_of(http: httpx.AsyncClient, parent: str) -> str:
    shown = await eventually(http, f"/v1/workflows/{one_segment(parent)}", lambda b: b["children"])
    child: str = shown["children"][0]["child_workflow_id"]
    assert child == f"{parent}/child/2"  # the SDK's default: WorkflowStarted is 1, the child's start 2
    return child


async def test_every_route_reaches_a_default_child_id_escaped_or_not(
    http: httpx.AsyncClient, start_orchestrator_: StartOrchestrator, workflows: Workflows
) -> None:
    parent = "orders/eu/1042"
    await start(http, parent, "tests.default_child")
    child = await default_child_of(http, parent)
    for path in (one_segment(child), child):  # `orders%2Feu%2F1042%2Fchild%2F2`, and as it is
        shown = await eventually(http, f"/v1/workflows/{path}", lambda b: b["status"] == "running")
        assert shown["workflow_id"] == child
        history = await http.get(f"/v1/workflows/{path}/history", params={"origin": "history"})
        assert history.status_code == 200, history.text
        assert history.json()["items"][0]["type"] == "workflow.started"
    signalled = await http.post(
        f"/v1/workflows/{one_segment(child)}/signal",
        json={"signal": "go", "payload": {"by": "ops"}},
        params={"wait": 30},
    )
    assert signalled.status_code == 200, signalled.text
    assert signalled.json()["status"] == "accepted"  # the orchestrator applied it to the child
    done = await eventually(
        http, f"/v1/workflows/{one_segment(parent)}", lambda b: b["status"] == "completed"
    )
    assert done["result"]["child"]["go"] == {"by": "ops"}

    # Cancel and terminate, each on another parent's child, one escaped and one not.
    for n, verb, path_of, status in (
        (1, "cancel", one_segment, "cancelled"),
        (2, "terminate", str, "terminated"),
    ):
        other = f"orders/eu/{n}"
        await start(http, other, "tests.default_child")
        other_child = await default_child_of(http, other)
        await eventually(
            http, f"/v1/workflows/{one_segment(other_child)}", lambda b: b["status"] == "running"
        )
        ended = await http.post(
            f"/v1/workflows/{path_of(other_child)}/{verb}", json={"reason": "test"}, params={"wait": 30}
        )
        assert ended.status_code == 200, ended.text
        assert ended.json()["status"] == "accepted"
        await eventually(
            http, f"/v1/workflows/{one_segment(other_child)}", lambda b, s=status: b["status"] == s
        )


async def test_an_id_ending_like_a_route_is_reached_escaped(
    http: httpx.AsyncClient, start_orchestrator_: StartOrchestrator, workflows: Workflows
) -> None:
    # Unescaped, `/v1/workflows/x/history` is the history of `x`; escaped, the id is one segment.
    await start(http, "x/history", "tests.waits_for_go")
    shown = await eventually(http, "/v1/workflows/x%2Fhistory", lambda b: b["status"] == "running")
    assert shown["workflow_id"] == "x/history"
    history = await http.get("/v1/workflows/x%2Fhistory/history")
    assert history.status_code == 200
    assert {e["type"] for e in history.json()["items"]} >= {"workflow.start"}
    assert (await http.get("/v1/workflows/x/history")).status_code == 404  # no workflow `x`


async def test_ids_that_are_not_workflow_ids_are_a_422_naming_the_field(http: httpx.AsyncClient) -> None:
    for path in ("a%20b", "a%25b", "%E5%AD%97", "-a", "a%00b"):
        response = await http.get(f"/v1/workflows/{path}")
        assert response.status_code == 422, (path, response.text)
        detail = response.json()["detail"]
        assert detail.startswith(("workflow_id:", "the path:")), (path, detail)


async def test_the_python_client_and_the_cli_reach_a_default_child(
    http: httpx.AsyncClient,
    api_url: str,
    kafka: KafkaSettings,
    start_orchestrator_: StartOrchestrator,
    workflows: Workflows,
) -> None:
    parent = "orders/us/7"
    await start(http, parent, "tests.default_child")
    child = await default_child_of(http, parent)
    await eventually(http, f"/v1/workflows/{one_segment(child)}", lambda b: b["status"] == "running")

    cli = Cli(kafka, api_url)
    shown = await cli("workflow", "show", child)
    assert shown.code == 0, shown.err
    assert child in shown.out
    history = await cli("workflow", "history", child)
    assert history.code == 0, history.err
    assert "workflow.started" in history.out

    async with Client(HttpTransport(api_url, token=TEST_TOKEN)) as client:
        workflow = await client.get_workflow(child)
        assert workflow.workflow_id == child
        sent = await client.signal_workflow(child, "go", {"by": "client"}, wait=30)
        assert sent.outcome is not None
        assert sent.outcome.status == "accepted"
    done = await eventually(
        http, f"/v1/workflows/{one_segment(parent)}", lambda b: b["status"] == "completed"
    )
    assert done["result"]["child"]["go"] == {"by": "client"}


async def test_a_parent_with_the_longest_id_starts_and_reaches_its_default_child(
    http: httpx.AsyncClient, start_orchestrator_: StartOrchestrator, workflows: Workflows
) -> None:
    # `{parent}/child/{sequence}` does not fit 200 characters here: the parent used to fail at its
    # child's start (ValidationError); the default is now a cut of the parent id with a digest.
    parent = "orders/" + "x" * 193
    await start(http, parent, "tests.default_child")
    shown = await eventually(http, f"/v1/workflows/{one_segment(parent)}", lambda b: b["children"])
    assert shown["status"] == "running"
    child = shown["children"][0]["child_workflow_id"]
    assert child == default_child_id(parent, 2)
    assert len(child) == 200
    await eventually(http, f"/v1/workflows/{one_segment(child)}", lambda b: b["status"] == "running")
    signalled = await http.post(
        f"/v1/workflows/{one_segment(child)}/signal",
        json={"signal": "go", "payload": {}},
        params={"wait": 30},
    )
    assert signalled.json()["status"] == "accepted", signalled.text
    await eventually(http, f"/v1/workflows/{one_segment(parent)}", lambda b: b["status"] == "completed")
