"""The dashboard's views tell the truth, in a real headless Chromium on the real Kafka and
PostgreSQL: actions shown only where they apply, lists that refresh by themselves, the New schedule
form's handler warning, the downstreams header counted from its rows, the DLQ table at 1440 px.

The api is served on a loopback port; the scene is events on the real topics, projected by the
running app.
"""

from pathlib import Path

from playwright.async_api import Browser, Page, expect

from slotflow.contracts import WorkflowCompleted, WorkflowStarted, history_event_id
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, Emitter
from tests.integration.cli.support import served


async def _page(browser: Browser, *, width: int = 1280) -> tuple[Page, list[str]]:
    page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": width, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    return page, problems


async def test_a_closed_workflow_shows_no_signal_cancel_or_terminate(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    for workflow_id in ("order-open", "order-done"):
        started = WorkflowStarted(
            workflow_id=workflow_id, sequence=1, workflow_type="order", command_id=workflow_id
        )
        await emit(WORKFLOW_HISTORY, started, id=history_event_id(workflow_id, 1), key=workflow_id)
    done = WorkflowCompleted(workflow_id="order-done", sequence=2, result={"shipped": True})
    await emit(WORKFLOW_HISTORY, done, id=history_event_id("order-done", 2), key="order-done")
    async with served(create_app(api_settings)) as base:
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/workflows/order-done")
        await expect(page.locator('[data-closed="completed"]')).to_have_text(
            "This workflow is completed: it takes no signal, cancel or terminate.", timeout=20_000
        )
        for name in ("Send signal", "Cancel workflow", "Terminate workflow"):
            await expect(page.get_by_role("button", name=name)).to_have_count(0)
        await page.goto(f"{base}/ui/workflows/order-open")
        for name in ("Send signal", "Cancel workflow", "Terminate workflow"):
            await expect(page.get_by_role("button", name=name)).to_have_count(1)
        assert problems == []
