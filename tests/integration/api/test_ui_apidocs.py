"""/v1/docs (Swagger UI) and /v1/redoc (ReDoc) render the API offline: every request stays on the api.

The browser answers any request to another origin with an error, as a machine without internet
would, and the test records it: before the assets were served by the api itself, /v1/docs asked a
CDN for Swagger UI and stayed blank.
"""

from pathlib import Path

import httpx
from playwright.async_api import Browser, Request, Route, expect

from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH
from tests.integration.api.test_ui import _watch_errors
from tests.integration.cli.support import served


async def test_swagger_ui_and_redoc_render_without_another_origin(
    api_settings: Settings, browser: Browser, shots: Path
) -> None:
    async with served(create_app(api_settings)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=10, headers=AUTH) as http:
            moved = await http.get("/docs")
            assert moved.status_code == 307
            assert moved.headers["location"] == "/v1/docs"
            moved = await http.get("/redoc")
            assert moved.status_code == 307
            assert moved.headers["location"] == "/v1/redoc"

        elsewhere: list[str] = []

        async def offline(route: Route, request: Request) -> None:
            if request.url.startswith(base):
                await route.continue_()
            else:
                elsewhere.append(request.url)
                await route.abort("internetdisconnected")

        page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 900})
        await page.route("**/*", offline)
        problems = _watch_errors(page)

        await page.goto(f"{base}/v1/docs")
        # Swagger UI drew the operations from /v1/openapi.json: one block per path and method.
        await expect(page.locator(".swagger-ui .info .title")).to_contain_text("slotflow", timeout=20_000)
        await expect(
            page.locator(".opblock-summary-path", has_text="/v1/schedules/{schedule_id}/pause")
        ).to_have_count(1)
        await page.screenshot(path=shots / "api-swagger-ui.png")

        await page.goto(f"{base}/v1/redoc")
        await expect(page.locator("h1", has_text="slotflow")).to_be_visible(timeout=20_000)
        await expect(page.get_by_text("/v1/schedules/{schedule_id}/pause").first).to_be_attached()
        await page.screenshot(path=shots / "api-redoc.png")

        await page.close()
        assert elsewhere == [], f"fetched from another origin: {elsewhere}"
        # ReDoc's sidebar credits its vendor with a logo from their CDN; the page's CSP refuses it
        # (an offline machine could not load it either), and nothing else may fail.
        assert [p for p in problems if "cdn.redoc.ly" not in p] == [], problems
