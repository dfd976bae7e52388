"""The dashboard's downstreams page in a real headless Chromium, with a claimer answering its buttons.

The api is served on a loopback port and a claimer runs in-process, both on the real Kafka and
PostgreSQL. An operator's open (through the api) shows on the page; the page's Close button, with
a reason, publishes CloseDownstream, the claimer applies it, and the page shows the closed circuit
and both changes.
"""

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from slotflow_claimer.app import ClaimerService
from tests.integration.api.conftest import AUTH
from tests.integration.claimer.support import settings_for
from tests.integration.cli.support import served

CLIENT = {"X-Slotflow-Client": "test", **AUTH}


async def test_downstreams_page_shows_and_closes_a_downstream(
    api_settings: Settings, kafka: KafkaSettings, pg_dsn: str, browser: Browser, shots: Path
) -> None:
    claimer = ClaimerService(
        settings_for(kafka, pg_dsn, downstream_report_interval_seconds=0.5), registry=HandlerRegistry()
    )
    await claimer.start()
    try:
        async with served(create_app(api_settings)) as base:
            async with httpx.AsyncClient(base_url=base, timeout=40, headers=CLIENT) as http:
                opened = await http.post(
                    "/v1/downstreams/bank-api/open?wait=20", json={"reason": "bank maintenance, INC-9"}
                )
                assert opened.status_code == 200, opened.text
            page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 860})
            problems: list[str] = []
            page.on("pageerror", lambda err: problems.append(str(err)))
            await page.goto(f"{base}/ui/downstreams?name=bank-api")
            await expect(page.get_by_role("heading", level=1)).to_have_text("Downstreams")
            await expect(page.locator('nav a[aria-current="page"]')).to_have_text("Downstreams")
            listing = page.get_by_role("table", name="Downstreams")
            row = listing.get_by_role("row").filter(has_text="bank-api")
            await expect(row).to_contain_text("opened by an operator")
            changes = page.get_by_role("table", name="Changes, newest first")
            await expect(changes).to_contain_text("bank maintenance, INC-9")

            # Close without a reason: refused on the page, nothing sent.
            await row.get_by_role("button", name="Close bank-api").click()
            await expect(page.get_by_role("status")).to_contain_text("Give a reason first")
            await page.get_by_label("Reason").fill("bank confirmed recovery")
            await row.get_by_role("button", name="Close bank-api").click()
            await expect(page.get_by_role("status")).to_contain_text("applied", timeout=20_000)
            await expect(listing.get_by_role("row").filter(has_text="bank-api")).to_contain_text(
                "closed", timeout=20_000
            )
            await expect(changes).to_contain_text("operator_close")
            await page.screenshot(path=shots / "dashboard-downstreams.png", full_page=True)
            assert problems == []
    finally:
        await claimer.stop(grace=0.5)
