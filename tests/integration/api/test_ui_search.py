"""The dashboard's query box, in a real headless Chromium on the real Kafka and PostgreSQL: a query
lists the workflows its search attributes select, kept in the URL; a query that does not parse shows
the api's message (where and what) under the box instead of the list; a workflow's page shows its
memo and search attributes.
"""

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from playwright.async_api import Browser, Page, expect

from slotflow.contracts import WorkflowStarted, history_event_id
from slotflow.contracts.search import typed_search_attributes
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, Emitter
from tests.integration.cli.support import served


async def _page(browser: Browser) -> tuple[Page, list[str]]:
    page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(str(err)))
    # A 400 the page asked for is logged by the browser as a failed resource: not a script error.
    page.on(
        "console",
        lambda msg: (
            problems.append(msg.text) if msg.type == "error" and "status of 400" not in msg.text else None
        ),
    )
    return page, problems


async def test_the_query_box_lists_by_search_attributes_and_says_what_is_wrong(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    for workflow_id, attributes in (
        (
            "ui-acme",
            {"Customer": "acme", "AmountCents": 12999, "PromisedBy": datetime(2026, 12, 24, 18, tzinfo=UTC)},
        ),
        ("ui-globex", {"Customer": "globex", "AmountCents": 500}),
    ):
        started = WorkflowStarted(
            workflow_id=workflow_id,
            sequence=1,
            workflow_type="orders.checkout",
            command_id=workflow_id,
            memo={"note": f"memo of {workflow_id}"},
            search_attributes=typed_search_attributes(attributes),
        )
        await emit(WORKFLOW_HISTORY, started, id=history_event_id(workflow_id, 1), key=workflow_id)
    async with served(create_app(api_settings)) as base:
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/workflows")
        await expect(page.get_by_role("link", name="ui-globex")).to_be_visible(timeout=20_000)
        box = page.get_by_label("Query")
        await box.fill("Customer = 'acme' AND AmountCents > 10000")
        await page.get_by_role("button", name="Apply").click()
        await expect(page.get_by_role("link", name="ui-acme")).to_be_visible(timeout=20_000)
        await expect(page.get_by_role("link", name="ui-globex")).to_have_count(0)
        assert "query=Customer" in page.url
        await expect(page.get_by_label("Query")).to_have_value("Customer = 'acme' AND AmountCents > 10000")
        # A bulk cancel cannot carry the query: without ticks it takes the open rows listed, and says so.
        await expect(page.get_by_text("every open one listed below")).to_be_visible()
        await page.screenshot(path=str(shots / "dashboard-workflows-query.png"), full_page=True)

        # A query that does not parse: the api's message under the box, and no list (the page
        # sends the query trimmed: the end is at 11).
        await page.goto(f"{base}/ui/workflows?query={quote('Customer = ')}")
        alert = page.locator("#query-error")
        await expect(alert).to_have_text(
            "query: at 11: expected a value ('text', a number, TRUE or FALSE), found the end of the query (HTTP 400)",
            timeout=20_000,
        )
        await expect(page.get_by_label("Query")).to_have_attribute("aria-invalid", "true")
        await expect(page.get_by_role("link", name="ui-acme")).to_have_count(0)

        # The workflow's page shows its memo and search attributes.
        await page.goto(f"{base}/ui/workflows/ui-acme")
        listed = page.locator("dl.search-attributes")
        await expect(listed).to_contain_text("Customer", timeout=20_000)
        await expect(listed).to_contain_text('"acme"')
        await expect(listed).to_contain_text("2026-12-24T18:00:00Z")
        await expect(page.get_by_text('"note": "memo of ui-acme"')).to_have_count(1)
        assert problems == []
