"""Every request-body example in docs/api.md is sent to the api and must be accepted: the
examples a new user copies cannot drift from what the api takes."""

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx

from slotflow.contracts import ScheduleCreated, WorkflowStarted, history_event_id
from slotflow.contracts.topics import SCHEDULE_EVENTS, WORKFLOW_HISTORY
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json, interval

DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
BLOCK = re.compile(r"```http\n(.*?)```", re.S)
#: Every command route: each needs an example.
COMMANDS = {
    "POST /v1/schedules",
    "PATCH /v1/schedules/{id}",
    "PUT /v1/schedules/{id}",
    "POST /v1/schedules/{id}/pause",
    "POST /v1/schedules/{id}/resume",
    "POST /v1/schedules/{id}/trigger",
    "POST /v1/schedules/{id}/backfill",
    "POST /v1/schedules/{id}/rerun",
    "POST /v1/schedules/{id}/mark",
    "DELETE /v1/schedules/{id}",
    "POST /v1/schedules/pause",
    "POST /v1/schedules/resume",
    "POST /v1/workflows",
    "POST /v1/workflows/{id}/signal",
    "POST /v1/workflows/{id}/cancel",
    "POST /v1/workflows/{id}/terminate",
    "POST /v1/workflows/{id}/activities/2/retry",
    "POST /v1/workflows/cancel",
    "POST /v1/workflows/terminate",
    "POST /v1/dlq/redrive",
    "POST /v1/dlq/discard",
}


#: Commands on several schedules: the answer lists one command per schedule.
BULK = frozenset({"/v1/schedules/pause", "/v1/schedules/resume"})
#: Commands on several workflows: the answer lists the workflows taken, each with its command.
BULK_WORKFLOWS = frozenset({"/v1/workflows/cancel", "/v1/workflows/terminate"})


def examples() -> list[tuple[str, str, object]]:
    found = []
    for block in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        first, _, rest = block.partition("\n")
        method, path = first.split()
        found.append((method, path, json.loads(rest) if rest.strip() else None))
    return found


def _route(method: str, path: str) -> str:
    parts = path.split("/")
    if path in BULK | BULK_WORKFLOWS:
        return f"{method} {path}"
    if len(parts) > 3 and parts[2] in ("schedules", "workflows"):
        parts[3] = "{id}"
    return f"{method} {'/'.join(parts)}"


async def _seed_repairable_slots(emit: Emitter, client: httpx.AsyncClient) -> None:
    """The examples' schedule, hourly since before the repair examples' slots and with no run
    recorded: each of those slots is missed, so a re-run or a mark of it is accepted."""
    anchor = datetime(2026, 11, 30, tzinfo=UTC)
    created = ScheduleCreated(
        schedule_id="nightly-payouts", definition=interval(3600, anchor), paused=False, next_fire_at=anchor
    )
    await emit(
        SCHEDULE_EVENTS, created, id="nightly-payouts/created", key="nightly-payouts", occurred_at=anchor
    )
    await eventually_json(client, "/v1/schedules/nightly-payouts", lambda body: body["schedule_id"])


async def _seed_open_workflow(emit: Emitter, client: httpx.AsyncClient) -> None:
    """The examples' workflow, running: a bulk cancel or terminate of it takes it (no orchestrator
    runs here, so the single cancel and terminate before them leave it running)."""
    started = WorkflowStarted(
        workflow_id="order-1042", sequence=1, workflow_type="orders.checkout", command_id="start-1042"
    )
    await emit(
        WORKFLOW_HISTORY,
        started,
        id=history_event_id("order-1042", 1),
        key="order-1042",
        source="orchestrator",
    )
    await eventually_json(client, "/v1/workflows/order-1042", lambda body: body["status"] == "running")


async def test_every_command_has_an_example_and_the_api_accepts_each(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    await _seed_repairable_slots(emit, client)
    await _seed_open_workflow(emit, client)
    found = examples()
    assert {_route(method, path) for method, path, _ in found} == COMMANDS
    for method, path, body in found:
        response = await client.request(method, path, json=body)
        assert response.status_code == 202, (method, path, response.text)
        if path in BULK:
            assert all(c["command_id"] for c in response.json()["commands"])
        elif path in BULK_WORKFLOWS:
            assert all(w["command_id"] for w in response.json()["workflows"])
            assert response.json()["count"] >= 1
        else:
            assert response.json()["command_id"]


#: Request bodies whose examples come with the dlq routes' redesign (redrive as a request to the
#: DLQ service, with dry runs), not here.
WITHOUT_EXAMPLES_YET = frozenset({"POST /v1/dlq/redrive", "POST /v1/dlq/discard"})
#: Routes answered by another service than the api (a query, by the orchestrator that holds the
#: workflow): none runs in this test.
NEEDS_AN_ORCHESTRATOR = frozenset({"/v1/workflows/{workflow_id}/query"})
#: What the example requests put in the URL.
PATH_VALUES = {
    "schedule_id": "merchant-payouts",
    "workflow_id": "order-1042",
    "name": "bank-api",
    "sequence": 2,
}


def _schema(spec: dict[str, object], node: dict[str, object]) -> dict[str, object]:
    """The body's own schema: the `$ref` followed, an optional body's null branch left out."""
    if "anyOf" in node:
        (node,) = [branch for branch in node["anyOf"] if branch != {"type": "null"}]  # type: ignore[attr-defined]
    ref = node.get("$ref")
    if isinstance(ref, str):
        components: dict[str, dict[str, object]] = spec["components"]["schemas"]  # type: ignore[index]
        return components[ref.rsplit("/", 1)[1]]
    return node


async def test_every_request_body_in_the_openapi_document_has_examples_the_api_takes(
    client: httpx.AsyncClient,
) -> None:
    # Swagger showed `"expression": "string"`: no body had an example.
    spec = (await client.get("/v1/openapi.json")).json()
    checked = 0
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody")
            if body is None or f"{method.upper()} {path}" in WITHOUT_EXAMPLES_YET:
                continue
            schema = _schema(spec, body["content"]["application/json"]["schema"])
            found = schema.get("examples")
            assert isinstance(found, list), (method, path, "no examples")
            assert found, (method, path)
            url = path.format(**PATH_VALUES)
            for example in found:
                if path in NEEDS_AN_ORCHESTRATOR:
                    # No orchestrator serves queries here: the api says so, fast, with a 503.
                    asked = await client.request(
                        method.upper(), url, json={**example, "timeout_seconds": 0.2}
                    )
                    assert asked.status_code == 503, (method, path, example, asked.text)
                    assert "was not answered" in asked.json()["detail"], asked.text
                    checked += 1
                    continue
                response = await client.request(method.upper(), url, json=example)
                assert response.status_code not in (400, 422), (method, path, example, response.text)
                assert response.status_code < 500, (method, path, example, response.text)
                checked += 1
    assert checked >= 18, checked
