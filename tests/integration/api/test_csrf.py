"""CSRF and Host checks on the real app (issue 23): a cross-origin form post to a bodyless command
used to trigger a run on a paused schedule through an operator's browser."""

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH


@pytest.fixture
async def bare(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that sends only what a browser form would (no X-Slotflow-Client)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api.test", timeout=40, headers=AUTH
    ) as http:
        yield http


async def test_a_cross_origin_form_post_gets_403_and_publishes_nothing(bare: httpx.AsyncClient) -> None:
    form = await bare.post(
        "/v1/schedules/paused-one/trigger",
        content=b"",
        headers={"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 403
    assert "cross-origin" in form.json()["detail"]
    # Same origin, still a form: no JSON body and no client header, so a form from anywhere.
    plain = await bare.post(
        "/v1/schedules/paused-one/trigger", content=b"x", headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 403
    assert "X-Slotflow-Client" in plain.json()["detail"]
    unknown = await bare.get("/v1/commands/never")  # nothing was published by either
    assert unknown.json()["status"] == "unknown"


async def test_what_the_dashboard_cli_and_scripts_send_still_passes(bare: httpx.AsyncClient) -> None:
    # The dashboard: its own origin, the client header, JSON when there is a body.
    dashboard = await bare.post(
        "/v1/schedules/s1/trigger", headers={"Origin": "http://api.test", "X-Slotflow-Client": "dashboard"}
    )
    assert dashboard.status_code == 202
    # A script with a JSON body and no Origin (not a browser).
    script = await bare.post("/v1/schedules/s1/pause", json={"reason": "maintenance"})
    assert script.status_code == 202
    # Reads need nothing.
    assert (await bare.get("/v1/schedules")).status_code == 200
    # A JSON body from a foreign origin is still refused.
    foreign = await bare.post("/v1/schedules/s1/pause", json={}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403


async def test_allowed_hosts_refuse_any_other_host(api_settings: Settings) -> None:
    settings = api_settings.model_copy(
        update={"api": api_settings.api.model_copy(update={"allowed_hosts": ["slotflow.internal"]})}
    )
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://rebound.example", headers=AUTH
        ) as http:
            refused = await http.get("/v1/schedules")
            assert refused.status_code == 403
            assert "Host" in refused.json()["detail"]
        async with httpx.AsyncClient(
            transport=transport, base_url="http://slotflow.internal:8080", headers=AUTH
        ) as http:
            assert (await http.get("/v1/schedules")).status_code == 200


async def test_a_schedule_id_with_a_slash_is_refused_as_the_routes_cannot_name_it(
    client: httpx.AsyncClient,
) -> None:
    """Issue 23: `team/a` was created and then could not be read, paused or deleted."""
    body = {
        "schedule_id": "team/a",
        "definition": {"spec": {"kind": "cron", "expression": "0 0 * * *"}, "handler": "h"},
    }
    created = await client.post("/v1/schedules", json=body)
    assert created.status_code == 422
    assert "schedule_id" in created.text
    # The same name works without the slash, through every route.
    body["schedule_id"] = "team-a"
    assert (await client.post("/v1/schedules", json=body)).status_code == 202
    assert (await client.post("/v1/schedules/team-a/pause", json={})).status_code == 202
