"""The dashboard with authentication on: without a token it asks for one; a token entered once is
sent as a bearer header on every call, and a `read` token's Pause is refused with the API's 403."""

import httpx
from playwright.async_api import Browser, expect

from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import CLIENT_HEADERS
from tests.integration.cli.support import served
from tests.integration.ticker.support import start_ticker, stop_ticker

DEFINITION = {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "reports.build"}


async def test_the_dashboard_asks_for_a_token_and_a_read_token_cannot_pause(
    api_settings: Settings, kafka: KafkaSettings, pg_dsn: str, browser: Browser
) -> None:
    sid = unique_name("ui-auth")
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        await _scene(api_settings, browser, sid)
    finally:
        await stop_ticker(ticker)


async def _scene(api_settings: Settings, browser: Browser, sid: str) -> None:
    async with served(create_app(api_settings)) as base:
        async with httpx.AsyncClient(base_url=base, headers=CLIENT_HEADERS, timeout=30) as http:
            created = await http.post(
                "/v1/schedules", params={"wait": 20}, json={"schedule_id": sid, "definition": DEFINITION}
            )
            assert created.status_code == 200, created.text
            token = await http.post("/v1/tokens", json={"name": unique_name("viewer"), "scope": "read"})
            assert token.status_code == 201, token.text
            secret = token.json()["secret"]
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        try:
            await page.goto(f"{base}/ui/")
            form = page.get_by_role("form", name="API token")
            await expect(form).to_be_visible()
            await expect(form).to_contain_text("The API needs a token.")
            await expect(page.get_by_role("status")).to_contain_text("HTTP 401")

            await page.get_by_role("textbox", name="Token").fill(secret)
            await page.get_by_role("button", name="Use token").click()
            await expect(form).to_be_hidden()
            listing = page.get_by_role("table", name="Schedules and their next slots")
            await expect(listing).to_contain_text(sid, timeout=20_000)
            assert secret not in await page.content()

            await page.goto(f"{base}/ui/schedules/{sid}")
            await page.get_by_role("button", name="Pause").click()
            await expect(page.get_by_role("status")).to_contain_text(
                "needs the 'operate' scope", timeout=10_000
            )

            await page.get_by_role("button", name="Forget token").click()
            await expect(page.get_by_role("form", name="API token")).to_be_visible()
        finally:
            await page.close()
