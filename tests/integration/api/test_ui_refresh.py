"""After a command the dashboard waits for the owning service to apply it and shows the new state.

The real ticker and DLQ service apply the commands (on the real broker and database); the page is
never reloaded: a marker set in the page before the click must still be there after it.
"""

from datetime import UTC, datetime
from pathlib import Path

import httpx
from playwright.async_api import Browser, Page, expect

from slotflow.contracts import (
    ActivityParked,
    ActivityScheduled,
    JobDue,
    WorkflowStarted,
    history_event_id,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import JOBS_DUE, WORKFLOW_HISTORY
from slotflow.core.identity import job_due_event_id
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, CLIENT_HEADERS
from tests.integration.api.test_ui import _watch_errors
from tests.integration.cli.support import served
from tests.integration.dlq.conftest import start_dlq, stop_dlq
from tests.integration.dlq.helpers import origin, park
from tests.integration.ticker.support import start_ticker, stop_ticker

SLOT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
DEFINITION = {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "reports.build"}


async def _same_document(page: Page) -> bool:
    return bool(await page.evaluate("window.slotflowNotReloaded === true"))


async def test_pause_resume_and_redrive_show_their_effect_without_a_reload(
    api_settings: Settings, kafka: KafkaSettings, pg_dsn: str, browser: Browser, shots: Path
) -> None:
    ticker = await start_ticker(kafka, pg_dsn)
    dlq = await start_dlq(kafka, pg_dsn, metrics_port=0)
    try:
        async with served(create_app(api_settings)) as base:
            async with httpx.AsyncClient(base_url=base, headers=CLIENT_HEADERS, timeout=30) as http:
                created = await http.post(
                    "/v1/schedules",
                    params={"wait": 20},
                    json={"schedule_id": "nightly-report", "definition": DEFINITION},
                )
                assert created.status_code == 200, created.text
            page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 860})
            problems = _watch_errors(page)
            await page.goto(f"{base}/ui/schedules/nightly-report")
            await expect(page.locator("dl.facts")).to_contain_text("active")
            await page.evaluate("window.slotflowNotReloaded = true")

            await page.get_by_label("Pause reason").fill("quarter close")
            await page.get_by_role("button", name="Pause").click()
            status = page.get_by_role("status")
            await expect(status).to_contain_text("published and applied", timeout=20_000)
            await expect(page.locator("dl.facts")).to_contain_text("paused quarter close")
            await expect(page.get_by_role("button", name="Resume")).to_be_enabled()
            assert await _same_document(page)

            await page.get_by_role("button", name="Resume").click()
            await expect(status).to_contain_text("Resume: command", timeout=5_000)
            await expect(status).to_contain_text("published and applied", timeout=20_000)
            await expect(page.get_by_role("button", name="Pause")).to_be_enabled()
            await expect(page.locator("dl.facts")).not_to_contain_text("paused")

            await page.get_by_role("button", name="Trigger now").click()
            await expect(status).to_contain_text("Trigger: command", timeout=5_000)
            await expect(status).to_contain_text("published and applied", timeout=20_000)
            assert await _same_document(page)

            # A letter parked by the real DLQ service; redriving it takes it off the parked list and
            # asks its owner (a schedule's run: the claimer, which does not run here, so it waits).
            due = JobDue(
                run_id="nightly-report@2026-12-02T02:00:00Z",
                job_id="nightly-report",
                slot=SLOT,
                handler="reports.build",
            )
            value = encode(
                wrap(
                    due, id=job_due_event_id(due.run_id, 1), key=due.job_id, source="ticker", occurred_at=SLOT
                )
            )
            async with Producer(kafka, client_id="ui-refresh") as producer:
                await park(
                    producer,
                    kafka,
                    origin(kafka.topic(JOBS_DUE), 7, value, key=due.job_id.encode()),
                    ValueError("bad"),
                    source="claimer",
                    reason="permanent_error",
                    run_id=due.run_id,
                    job_id=due.job_id,
                )
            async with httpx.AsyncClient(base_url=base, timeout=30, headers=AUTH) as http:

                async def parked() -> str | None:
                    items = (await http.get("/v1/dlq", params={"status": "parked"})).json()["items"]
                    return str(items[0]["dead_letter_id"]) if items else None

                letter = await assert_eventually(parked, timeout=30, message="the letter parked")
            await page.goto(f"{base}/ui/dlq")
            await page.evaluate("window.slotflowNotReloaded = true")
            letters = page.get_by_role("table", name="Dead letters")
            await expect(letters.get_by_role("row")).to_have_count(2)
            await page.get_by_role("button", name=f"Redrive {letter}").click()
            await expect(status).to_contain_text("published and applied", timeout=20_000)
            await expect(page.get_by_text("No dead letters match.")).to_be_visible()
            assert await _same_document(page)
            await page.locator('select[name="status"]').select_option("")
            await page.get_by_role("button", name="Apply").click()
            shown = page.get_by_role("table", name="Dead letters")
            await expect(shown).to_contain_text("redriving")
            await expect(shown).to_contain_text("asked of the claimer")
            await expect(shown).to_contain_text("redrive asked of the claimer by")

            # Several schedules paused at once with one reason, and resumed, from the list.
            async with httpx.AsyncClient(base_url=base, headers=CLIENT_HEADERS, timeout=30) as http:
                created = await http.post(
                    "/v1/schedules",
                    params={"wait": 20},
                    json={"schedule_id": "nightly-ledger", "definition": DEFINITION},
                )
                assert created.status_code == 200, created.text
            await page.goto(f"{base}/ui/?id_prefix=nightly")
            await page.evaluate("window.slotflowNotReloaded = true")
            listing = page.get_by_role("table", name="Schedules and their next slots")
            await expect(listing.get_by_role("row")).to_have_count(3)
            await page.get_by_label("Select nightly-report").check()
            await page.get_by_label("Select nightly-ledger").check()
            await page.get_by_label("Pause reason").fill("year-end freeze")
            await page.get_by_role("button", name="Pause selected").click()
            await expect(status).to_contain_text("2 command(s) published and applied", timeout=20_000)
            for sid in ("nightly-report", "nightly-ledger"):
                row = listing.get_by_role("row").filter(has_text=sid)
                await expect(row).to_contain_text("paused year-end freeze")
            await page.screenshot(path=shots / "dashboard-schedules-paused.png", full_page=True)
            await page.get_by_label("Select nightly-report").check()
            await page.get_by_label("Select nightly-ledger").check()
            await page.get_by_role("button", name="Resume selected").click()
            await expect(status).to_contain_text("2 command(s) published and applied", timeout=20_000)
            await expect(listing).not_to_contain_text("paused")
            assert await _same_document(page)

            # The calendar: every schedule's firings of the next 24 hours, soonest first.
            await page.get_by_role("link", name="Calendar").click()
            await page.wait_for_url(f"{base}/ui/calendar")
            await expect(page.locator('nav a[aria-current="page"]')).to_have_text("Calendar")
            firings = page.get_by_role("table", name="Firings, soonest first")
            # Hourly, each: 24 in the next 24 hours (25 when a slot falls exactly on now).
            await expect(firings.get_by_role("row").filter(has_text="nightly-ledger").first).to_be_visible()
            report_rows = await firings.get_by_role("row").filter(has_text="nightly-report").count()
            ledger_rows = await firings.get_by_role("row").filter(has_text="nightly-ledger").count()
            assert report_rows in (24, 25)
            assert ledger_rows in (24, 25)
            times = await firings.locator("time").evaluate_all("(nodes) => nodes.map((n) => n.dateTime)")
            assert times == sorted(times)
            await page.get_by_role("link", name="6 h").click()
            await page.wait_for_url(f"{base}/ui/calendar?hours=6")
            await expect(page.locator('p.pager strong[aria-current="true"]')).to_have_text("6 h")
            assert await page.get_by_role("table", name="Firings, soonest first").locator("time").count() in (
                12,
                13,
                14,
            )
            await page.screenshot(path=shots / "dashboard-calendar.png", full_page=False)

            # Create, edit, backfill and delete a schedule from the dashboard's forms.
            await page.get_by_role("link", name="Schedules").click()
            await page.get_by_text("New schedule").click()
            form = page.get_by_role("form", name="New schedule")
            await form.get_by_label("Schedule id").fill("hourly-fx")
            await form.get_by_label("Kind").select_option("interval")
            await form.get_by_label("Cron expression, interval or time").fill("1h")
            await form.get_by_label("Handler", exact=True).fill("fx.rates")
            await form.get_by_label("Payload (JSON object)").fill('{"pair": "EURUSD"}')
            await form.get_by_role("button", name="Create schedule").click()
            await page.wait_for_url(f"{base}/ui/schedules/hourly-fx", timeout=20_000)
            facts = page.locator("dl.facts")
            await expect(facts).to_contain_text("every 1h")
            await expect(facts).to_contain_text("fx.rates")

            await page.get_by_text("Edit", exact=True).click()
            edit = page.get_by_role("form", name="Edit schedule")
            await edit.get_by_label("Handler", exact=True).fill("fx.rates_v2")
            await edit.get_by_label("Tags (comma-separated)").fill("fx, hourly")
            await edit.get_by_role("button", name="Save changes").click()
            await expect(status).to_contain_text("Edit (handler, tags)", timeout=5_000)
            await expect(status).to_contain_text("published and applied", timeout=20_000)
            await expect(facts).to_contain_text("fx.rates_v2")
            await expect(facts).to_contain_text("fx, hourly")
            async with httpx.AsyncClient(base_url=base, timeout=30, headers=AUTH) as http:
                stored = (await http.get("/v1/schedules/hourly-fx")).json()["definition"]
            assert stored["payload"] == {"pair": "EURUSD"}  # kept: the edit sent only what changed

            await page.get_by_text("Backfill", exact=True).click()
            backfill = page.get_by_role("form", name="Backfill")
            await backfill.get_by_label("From (ISO 8601)").fill("2026-01-01T00:00:00Z")
            await backfill.get_by_label("To (ISO 8601)").fill("2026-01-01T03:00:00Z")
            await backfill.get_by_role("button", name="Dry run").click()
            await expect(page.locator("div.plan")).to_contain_text("Dry run: 3 slot(s)")
            await expect(page.locator("div.plan")).not_to_contain_text("null")
            await expect(
                page.get_by_role("list", name="Slots it would run").get_by_role("listitem")
            ).to_have_count(3)
            await page.screenshot(path=shots / "dashboard-forms.png", full_page=True)
            await backfill.get_by_role("button", name="Run backfill").click()
            await expect(status).to_contain_text("Backfill: command", timeout=5_000)
            await expect(status).to_contain_text("published and applied", timeout=20_000)

            await page.get_by_text("Delete", exact=True).click()
            delete = page.get_by_role("form", name="Delete schedule")
            await delete.get_by_role("button", name="Delete schedule").click()
            await expect(status).to_contain_text("Type hourly-fx to confirm the delete.")
            await delete.get_by_label("Type hourly-fx to confirm").fill("hourly-fx")
            await delete.get_by_role("button", name="Delete schedule").click()
            await page.wait_for_url(f"{base}/ui/", timeout=20_000)
            await expect(
                page.get_by_role("table", name="Schedules and their next slots")
            ).not_to_contain_text("hourly-fx")
            assert problems == []
    finally:
        await stop_dlq(dlq)
        await stop_ticker(ticker)


async def test_a_workflow_waiting_on_a_parked_activity_shows_it_with_its_retry(
    api_settings: Settings, kafka: KafkaSettings, browser: Browser
) -> None:
    wid = "order-88"
    events = [
        WorkflowStarted(workflow_id=wid, sequence=1, workflow_type="order", command_id="s-88"),
        ActivityScheduled(
            workflow_id=wid, sequence=2, activity="shipping.book", run_id=f"{wid}/2", on_dead_letter="park"
        ),
        ActivityParked(
            workflow_id=wid,
            sequence=3,
            scheduled_sequence=2,
            reason="attempts_exhausted",
            error_type="CarrierClosed",
        ),
    ]
    async with Producer(kafka, client_id="ui-parked") as producer:
        for event in events:
            envelope = wrap(
                event,
                id=history_event_id(wid, event.sequence),
                key=wid,
                source="orchestrator",
                occurred_at=SLOT,
            )
            await producer.send(kafka.topic(WORKFLOW_HISTORY), envelope)
    async with served(create_app(api_settings)) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=AUTH) as http:

            async def folded() -> bool:
                response = await http.get(f"/v1/workflows/{wid}")
                return response.status_code == 200 and response.json().get("last_sequence") == 3

            await assert_eventually(folded, timeout=30, message="the parked workflow in the read model")
        page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 860})
        problems = _watch_errors(page)
        await page.goto(f"{base}/ui/workflows/{wid}")
        facts = page.locator("dl.facts")
        await expect(facts).to_contain_text("waiting: activity parked: shipping.book #2 (attempts_exhausted)")
        await page.get_by_role("button", name="Retry activity #2 shipping.book").click()
        status = page.get_by_role("status")
        await expect(status).to_contain_text("Retry of #2 shipping.book: command", timeout=5_000)
        # No orchestrator runs here: the retry is published, and waits for its answer. The commands
        # list is projected from the command topic, so it shows the retry once the projector read it.
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=AUTH) as http:

            async def listed() -> list[str]:
                answer = await http.get("/v1/commands", params={"command_type": "workflow.retry_activity"})
                return [c["subject"] for c in answer.json()["items"]]

            async def retry_listed() -> bool:
                return await listed() == [wid]

            await assert_eventually(retry_listed, timeout=30, message="the retry in the commands list")
        assert problems == []
