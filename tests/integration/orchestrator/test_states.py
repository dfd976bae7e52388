"""States that tell the truth, on the real broker and database with an orchestrator, a claimer,
a ticker and the api: a rejected start shows `rejected` with its reason (it stayed `requested`),
a cancel of an unknown id is rejected and makes no workflow row, a terminated workflow shows
`terminated` with its timer cancelled (at the ticker too), a signal wait names its signal, a
host clock read leaves the workflow stuck with the call named and the orchestrator says so in its
log, and the attention filter (HTTP and CLI) lists the stuck and the long waits."""

import asyncio
import logging
from typing import Any

import httpx
import pytest

from slotflow.contracts import NonDeterminismDetected, TimerStarted
from slotflow.pg.statements import sql
from slotflow.testing import assert_eventually
from tests.integration.api.conftest import CLIENT_HEADERS
from tests.integration.cli.conftest import Cli, api_settings, api_url, cli  # noqa: F401 - the served api
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica


async def _shown(http: httpx.AsyncClient, workflow_id: str, ready: Any) -> dict[str, Any]:
    """The api's view of the workflow once ``ready(body)`` holds."""
    seen: list[Any] = [None]

    async def probe() -> dict[str, Any] | None:
        answer = await http.get(f"/v1/workflows/{workflow_id}")
        seen[0] = answer.json() if answer.status_code == 200 else answer.status_code
        body = seen[0]
        return body if isinstance(body, dict) and ready(body) else None

    try:
        return await assert_eventually(probe, timeout=60, message=f"{workflow_id} as expected")
    except AssertionError as err:
        raise AssertionError(f"{workflow_id}: last seen {seen[0]}") from err


async def _listed(http: httpx.AsyncClient, attention: str) -> list[str]:
    answer = await http.get("/v1/workflows", params={"attention": attention, "limit": 100})
    assert answer.status_code == 200, answer.text
    return sorted(w["workflow_id"] for w in answer.json()["items"])


async def test_stuck_workflows_and_long_signal_waits_need_attention(
    workflows: Workflows,
    api_url: str,  # noqa: F811 - the served api
    cli: Cli,  # noqa: F811 - the CLI against it
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="slotflow_orchestrator")
    await workflows.start("clk-1", "tests.clock_reader", {"order_id": "clk-1"}, "start-clk-1")
    await workflows.start("aw-1", "tests.awaits_approval", {"order_id": "aw-1"}, "start-aw-1")
    await workflows.start("ap-1", "tests.approval", {"order_id": "ap-1"}, "start-ap-1")
    await workflows.start("ok-1", "tests.echo", {"order_id": "ok-1"}, "start-ok-1")

    # The host clock read is refused where it runs (not only in tests): stuck, the call named.
    stuck = (await workflows.wait("clk-1", "workflow.non_determinism_detected"))[-1]
    assert isinstance(stuck, NonDeterminismDetected)
    assert stuck.got == "time.time"
    logged = [r.getMessage() for r in caplog.records if "is stuck" in r.getMessage()]
    assert len(logged) == 1, logged
    assert "workflow clk-1 is stuck: its replay diverged at history sequence" in logged[0]
    assert "the code did time.time" in logged[0]

    (timer,) = [
        e for e in await workflows.wait("aw-1", "workflow.timer_started") if isinstance(e, TimerStarted)
    ]
    assert timer.signal == "approve"
    async with httpx.AsyncClient(base_url=api_url, headers=CLIENT_HEADERS, timeout=60) as http:
        stuck_row = await _shown(http, "clk-1", lambda b: b["status"] == "stuck")
        assert stuck_row["waiting_for"] is None
        timed = await _shown(http, "aw-1", lambda b: b["current_step"] == "signal approve")
        assert timed["waiting_for"] == "signal approve"
        assert [t["signal"] for t in timed["timers"]] == ["approve"]
        untimed = await _shown(http, "ap-1", lambda b: b["current_step"] == "a signal")
        assert untimed["waiting_for"] == "signal"
        await _shown(http, "ok-1", lambda b: b["status"] == "completed")

        # Long waits: none yet at a day; both signal waits past a second.
        assert await _listed(http, "1d") == ["clk-1"]
        await asyncio.sleep(1.5)
        assert await _listed(http, "1s") == ["ap-1", "aw-1", "clk-1"]
        bad = await http.get("/v1/workflows", params={"attention": "soon"})
        assert bad.status_code == 422
        assert "attention: 'soon' is not a duration" in bad.json()["detail"]

    listed = await cli("workflow", "list", "--attention", "1s")
    assert listed.code == 0, listed
    assert all(wid in listed.out for wid in ("ap-1", "aw-1", "clk-1"))
    assert "ok-1" not in listed.out
    day = await cli("workflow", "list", "--attention", "1d")
    assert day.code == 0, day
    assert "clk-1" in day.out
    assert "aw-1" not in day.out
    wrong = await cli("workflow", "list", "--attention", "soon")
    assert wrong.code != 0
    assert "--attention: 'soon' is not a duration" in wrong.err


async def test_a_rejected_start_shows_rejected_and_a_cancel_of_an_unknown_id_makes_no_row(
    workflows: Workflows,
    api_url: str,  # noqa: F811 - the served api
) -> None:
    async with httpx.AsyncClient(base_url=api_url, headers=CLIENT_HEADERS, timeout=60) as http:
        body = {"workflow_id": "rj-1", "workflow_type": "tests.nope", "input": {}}
        refused = await http.post("/v1/workflows", json=body, params={"wait": 30})
        assert refused.status_code == 409, refused.text
        shown = await _shown(http, "rj-1", lambda b: b["status"] != "requested")
        assert shown["status"] == "rejected"
        assert shown["rejection"] == "unknown workflow type 'tests.nope'"
        rejected = await http.get("/v1/workflows", params={"status": "rejected"})
        assert [w["workflow_id"] for w in rejected.json()["items"]] == ["rj-1"]

        ghost = await http.post("/v1/workflows/ghost-1/cancel", json={"reason": "who?"}, params={"wait": 30})
        assert ghost.status_code == 409, ghost.text
        assert ghost.json()["detail"] == "workflow ghost-1 is not known"
        command_id = ghost.json()["command_id"]

        async def command_seen() -> dict[str, Any] | None:
            row = (await http.get(f"/v1/commands/{command_id}")).json()
            return row if row.get("published_at") else None

        row = await assert_eventually(command_seen, timeout=60, message="the cancel projected")
        assert (row["status"], row["reason"]) == ("rejected", "workflow ghost-1 is not known")
        assert (await http.get("/v1/workflows/ghost-1")).status_code == 404


async def test_a_terminated_workflow_shows_terminated_and_its_timer_is_cancelled_at_the_ticker(
    ticker: Replica,
    workflows: Workflows,
    api_url: str,  # noqa: F811 - the served api
) -> None:
    await workflows.start("tm-1", "tests.sleeper", {"order_id": "tm-1", "seconds": 600}, "start-tm-1")
    (timer,) = [
        e for e in await workflows.wait("tm-1", "workflow.timer_started") if isinstance(e, TimerStarted)
    ]

    async def at_the_ticker() -> str | None:
        state: str | None = await workflows.db.fetchval(
            sql("SELECT state FROM {schema}.timers WHERE timer_id = $1", "ticker"), timer.timer_id
        )
        return state

    assert await assert_eventually(at_the_ticker, timeout=60, message="the sleep at the ticker") == "pending"
    async with httpx.AsyncClient(base_url=api_url, headers=CLIENT_HEADERS, timeout=60) as http:
        ended = await http.post("/v1/workflows/tm-1/terminate", json={"reason": "ops"}, params={"wait": 30})
        assert ended.status_code == 200, ended.text

        async def cancelled_at_the_ticker() -> bool:
            return await at_the_ticker() == "cancelled"

        await assert_eventually(cancelled_at_the_ticker, timeout=60, message="the ticker cancelled the sleep")
        shown = await _shown(http, "tm-1", lambda b: b["status"] not in ("requested", "running"))
    assert shown["status"] == "terminated"
    assert shown["error"] == {"type": "WorkflowTerminated", "message": "ops"}
    assert [(t["timer_id"], t["status"]) for t in shown["timers"]] == [(timer.timer_id, "cancelled")]
    assert shown["pending_timers"] == []
