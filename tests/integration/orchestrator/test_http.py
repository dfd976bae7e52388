"""examples/orders' saga started over HTTP through the api: `?wait=` returns once the orchestrator accepted the
start, and the read model (fed by the history topic the orchestrator publishes) shows the workflow
completed with its steps, its compensations and its activity runs."""

import httpx
import pytest
from fastapi import FastAPI

from slotflow.runs import HandlerRegistry
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.api.conftest import api_settings, app, client  # noqa: F401 - the api fixtures
from tests.integration.api.helpers import eventually_json
from tests.integration.orchestrator.orders_example import (
    WORKFLOW_TYPE,
    Sandbox,
    order,
    orders_registry,
    orders_workflow_code,
    sandbox,  # noqa: F401 - the example's sandbox fixture
)
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica


@pytest.fixture
def workflow_code() -> RuntimeWorkflowCode:
    return orders_workflow_code()


@pytest.fixture
def registry() -> HandlerRegistry:
    return orders_registry()


async def test_a_saga_started_over_http_is_accepted_and_shown_from_its_history(
    client: httpx.AsyncClient,  # noqa: F811 - the api fixture
    app: FastAPI,  # noqa: F811 - the api fixture
    workflows: Workflows,
    ticker: Replica,
    sandbox: Sandbox,  # noqa: F811 - the example's sandbox fixture
) -> None:
    body = {"workflow_id": "web-1", "workflow_type": WORKFLOW_TYPE, "input": order("web-1")}
    started = await client.post("/v1/workflows", json=body, params={"wait": 30})
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "accepted"

    unknown = await client.post(
        "/v1/workflows", json={**body, "workflow_id": "web-2", "workflow_type": "nope"}, params={"wait": 30}
    )
    assert unknown.status_code == 409
    assert unknown.json()["detail"] == "unknown workflow type 'nope'"

    shown = await eventually_json(client, "/v1/workflows/web-1", lambda b: b["status"] == "completed")
    assert [s["activity"] for s in shown["steps"]] == [
        "payments.authorize",
        "inventory.reserve",
        "payments.capture",
    ]
    assert all(s["state"] == "completed" for s in shown["steps"])
    assert shown["result"]["capture_id"] == "cap-web-1"

    failing = {
        "workflow_id": "web-3",
        "workflow_type": WORKFLOW_TYPE,
        "input": order("web-3", capture_declined=True),
    }
    assert (await client.post("/v1/workflows", json=failing, params={"wait": 30})).json()[
        "status"
    ] == "accepted"
    failed = await eventually_json(client, "/v1/workflows/web-3", lambda b: b["status"] == "failed")
    assert failed["compensated"] is True
    assert [(c["activity"], c["state"]) for c in failed["compensations"]] == [
        ("inventory.release", "done"),
        ("payments.void", "done"),
    ]
    assert sandbox.journal_of("web-3") == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]

    terminated = await client.post(
        "/v1/workflows/web-3/terminate", json={"reason": "late"}, params={"wait": 30}
    )
    assert terminated.status_code == 409
    # The api answers from its view: an ended workflow takes no terminate, and nothing is sent.
    assert terminated.json()["detail"].startswith("workflow 'web-3' is failed: a terminate applies only")
