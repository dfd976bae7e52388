"""Claimers announce the handlers they serve; a schedule whose handler none serves is warned
about (refused with ?strict=true), on the real stack (claimer and api)."""

import logging
from typing import Any

import httpx
import pytest

from slotflow.runs import HandlerRegistry, RunContext
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer

DEFINITION: dict[str, Any] = {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "reports.build"}


async def _build(ctx: RunContext) -> object:
    return {"run": ctx.run_id}


async def test_a_handler_no_claimer_serves_is_warned_about_and_refused_when_strict(
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before any claimer announced itself: the warning says so.
    early = await api.post("/v1/schedules", json={"schedule_id": "early", "definition": DEFINITION})
    assert early.status_code == 202
    assert "no live claimer has announced" in early.json()["warnings"][0]

    registry.register("reports.build", _build)
    with caplog.at_level(logging.INFO, logger="slotflow_claimer.app"):
        claimer = await start_claimer(announce_interval_seconds=1.0)
    # The start-up line names every handler the claimer loaded.
    assert any(
        f"claimer {claimer.owner} serves 2 handlers: payouts.pay_merchants, reports.build" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]

    async def announced() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.get("/v1/handlers")).json()
        return body if any(h["name"] == "reports.build" for h in body["handlers"]) else None

    handlers = await assert_eventually(announced, timeout=30, message="the claimer's announcement")
    assert {h["name"]: h["claimers"] for h in handlers["handlers"]}["reports.build"] == [claimer.owner]
    assert [c["live"] for c in handlers["claimers"]] == [True]

    served = await api.post("/v1/schedules", json={"schedule_id": "good", "definition": DEFINITION})
    assert served.status_code == 202
    assert served.json()["warnings"] == []

    typo = {**DEFINITION, "handler": "reprots.build"}
    warned = await api.post("/v1/schedules", json={"schedule_id": "typo", "definition": typo})
    assert warned.status_code == 202
    (warning,) = warned.json()["warnings"]
    assert "no live claimer serves handler 'reprots.build'" in warning
    assert "reports.build" in warning

    refused = await api.post(
        "/v1/schedules", params={"strict": "true"}, json={"schedule_id": "typo2", "definition": typo}
    )
    assert refused.status_code == 422
    assert "nothing was published" in refused.json()["detail"]
    patched = await api.patch(
        "/v1/schedules/good", params={"strict": "true"}, json={"handler": "reprots.build"}
    )
    assert patched.status_code == 422
