"""The dashboard's views tell the truth, in a real headless Chromium on the real Kafka and
PostgreSQL: actions shown only where they apply, lists that refresh by themselves, the New schedule
form's handler warning, the downstreams header counted from its rows, the DLQ table at 1440 px.

The api is served on a loopback port; the scene is events on the real topics, projected by the
running app.
"""

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Browser, Page, expect

from slotflow.contracts import (
    ClaimerAnnounced,
    CronSpec,
    DeadLetterStatusChanged,
    DownstreamReported,
    JobDue,
    RunRetrying,
    ScheduleCreated,
    ScheduleDefinition,
    WorkflowCompleted,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import (
    CLAIMERS,
    DLQ_EVENTS,
    DOWNSTREAM_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_EVENTS,
    WORKFLOW_HISTORY,
)
from slotflow.core.identity import run_id
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, Emitter
from tests.integration.api.helpers import cron, eventually_json
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
        # The page reads the read model once: wait until the projector has both workflows (a
        # loaded CI box took longer than the locator's wait to project them).
        async with httpx.AsyncClient(base_url=base, headers={"X-Slotflow-Client": "test", **AUTH}) as http:
            await eventually_json(http, "/v1/workflows/order-done", lambda w: w["status"] == "completed")
            await eventually_json(http, "/v1/workflows/order-open", lambda w: w["status"] == "running")
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


async def test_the_downstreams_held_counts_are_the_rows_shown(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    # The claimers last reported 8 held; the read model holds 9 (a run held since the report).
    # The page once read "Held runs (8)" above 9 rows.
    now = datetime.now(UTC).replace(microsecond=0)
    for k in range(9):
        slot = now - timedelta(minutes=10 - k)
        rid = run_id("payouts", slot)
        common: dict[str, Any] = {"run_id": rid, "job_id": "payouts", "slot": slot}
        await emit(JOBS_DUE, JobDue(**common, handler="payments.capture"), id=rid, key="payouts")
        held = RunRetrying(
            **common,
            attempt=1,
            fence_token=1,
            owner="c1",
            next_attempt=1,
            retry_at=now + timedelta(minutes=5),
            delay=timedelta(minutes=5),
            held_reason="circuit_open:bank-api",
        )
        await emit(RUN_EVENTS, held, id=f"{rid}/1/held", key="payouts")
    reported = DownstreamReported(
        downstream="bank-api",
        state="open",
        manual=True,
        window_seconds=60,
        first_attempts=0,
        retries=0,
        retry_allowance=10,
        successes=0,
        failures=3,
        held=8,
        changed_at=now - timedelta(minutes=11),
        at=now - timedelta(minutes=1),
    )
    await emit(DOWNSTREAM_EVENTS, reported, id="bank-api/reported/1", key="bank-api")
    async with served(create_app(api_settings)) as base:
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/downstreams?name=bank-api")
        held_table = page.get_by_role("table", name="Held runs (9), in slot order")
        await expect(held_table.locator("tbody tr")).to_have_count(9, timeout=20_000)
        listing = page.get_by_role("table", name="Downstreams")
        await expect(listing.locator("[data-held]")).to_have_text("9")
        assert problems == []


async def test_the_new_schedule_form_warns_about_a_handler_no_claimer_serves(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    announced = ClaimerAnnounced(
        claimer_id="claimer-1",
        handlers=("payments.capture", "payments.void"),
        interval=timedelta(minutes=10),
        started_at=datetime.now(UTC),
    )
    await emit(CLAIMERS, announced, id="claimer-1/announced/1", key="claimer-1")
    async with served(create_app(api_settings)) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-Slotflow-Client": "test", **AUTH}) as http:

            async def announced_seen() -> bool:
                body = (await http.get("/v1/handlers")).json()
                return any(h["name"] == "payments.capture" for h in body["handlers"])

            await assert_eventually(announced_seen, timeout=20, message="the claimer's announcement")
            # The API's own words, which the CLI prints too.
            expected = (await http.get("/v1/handlers", params={"handler": "payments.captrue"})).json()[
                "warnings"
            ]
        assert expected
        assert "no live claimer serves handler 'payments.captrue'" in expected[0]
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/")
        await page.get_by_text("New schedule").click()
        form = page.get_by_role("form", name="New schedule")
        warning = page.locator("[data-handler-warning]")
        await form.get_by_label("Handler").fill("payments.captrue")
        await expect(warning).to_have_text(f"Warning: {expected[0]}", timeout=10_000)
        await expect(warning).to_be_visible()
        await page.screenshot(path=shots / "dashboard-handler-warning.png", full_page=False)
        await form.get_by_label("Handler").fill("payments.capture")
        await expect(warning).to_be_hidden()
        assert problems == []


async def _create(emit: Emitter, schedule_id: str) -> None:
    created = ScheduleCreated(
        schedule_id=schedule_id, definition=cron("0 2 * * *"), paused=False, next_fire_at=None
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{schedule_id}/created", key=schedule_id)


async def test_the_schedules_list_refreshes_itself_and_waits_while_the_tab_is_hidden(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    # A list open on a screen was 25 s stale and nothing said so.
    await _create(emit, "live-a")
    async with served(create_app(api_settings)) as base:
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/?refresh=2")
        table = page.get_by_role("table", name="Schedules and their next slots")
        await expect(table).to_contain_text("live-a", timeout=20_000)
        live = page.locator("[data-live]")
        await expect(live).to_contain_text("refreshes every 2 s")
        await _create(emit, "live-b")
        # No reload: the list renders itself again and shows the new schedule.
        await expect(table).to_contain_text("live-b", timeout=20_000)
        await expect(live).to_have_text(re.compile(r"^Updated \d+ s ago; refreshes every 2 s\.$"))
        # Hidden: nothing is fetched, and the line says why the age grows.
        await page.evaluate(
            "() => { Object.defineProperty(document, 'hidden', { value: true, configurable: true });"
            " document.dispatchEvent(new Event('visibilitychange')); }"
        )
        refreshes = await live.get_attribute("data-refreshes")
        await _create(emit, "live-c")
        await page.wait_for_timeout(6_000)
        await expect(live).to_contain_text("refreshing paused while this tab is hidden")
        assert await live.get_attribute("data-refreshes") == refreshes
        await expect(table).not_to_contain_text("live-c")
        # Back in view: current at once.
        await page.evaluate(
            "() => { Object.defineProperty(document, 'hidden', { value: false, configurable: true });"
            " document.dispatchEvent(new Event('visibilitychange')); }"
        )
        await expect(table).to_contain_text("live-c", timeout=10_000)
        # A row selected (the operator is about to act): the list waits for them.
        await table.get_by_label("Select live-a").check()
        await expect(live).to_contain_text("refreshing paused while you edit", timeout=5_000)
        await page.screenshot(path=shots / "dashboard-live.png", full_page=False)
        assert problems == []


async def test_a_shifted_dst_slot_is_shown_at_the_wall_time_it_fires(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    # 02:30 on the last Sunday of March does not exist in Berlin: the slot fires at 03:00 CEST
    # (01:00 UTC). Its preview once read "02:30 local, +02:00".
    definition = ScheduleDefinition(
        spec=CronSpec(expression="30 2 * 3 0", timezone="Europe/Berlin"), handler="payments.capture"
    )
    created = ScheduleCreated(schedule_id="spring", definition=definition, paused=False, next_fire_at=None)
    await emit(SCHEDULE_EVENTS, created, id="spring/created", key="spring")
    async with served(create_app(api_settings)) as base:
        async with httpx.AsyncClient(base_url=base, headers={"X-Slotflow-Client": "test", **AUTH}) as http:

            async def projected() -> dict[str, Any]:
                answer = await http.get("/v1/schedules/spring")
                assert answer.status_code == 200, answer.text
                return dict(answer.json())

            body = await assert_eventually(projected, timeout=20, message="the schedule projected")
        shifted = [slot for slot in body["next_slots"] if slot["dst"] == "shifted"]
        assert shifted, body["next_slots"]
        first = shifted[0]
        fires = datetime.fromisoformat(first["at"])
        assert datetime.fromisoformat(first["local"]) == fires  # the wall time it fires at
        assert first["local"][11:16] == "03:00"
        assert first["local"].endswith("+02:00")
        assert first["nominal"][11:16] == "02:30"
        page, problems = await _page(browser)
        await page.goto(f"{base}/ui/schedules/spring")
        item = page.locator("ol.slots li").filter(has_text="shifted").first
        await expect(item).to_contain_text(
            "(03:00 local, +02:00) [shifted, stands for 02:30]", timeout=20_000
        )
        assert problems == []


async def test_the_dlq_table_shows_every_column_whole_at_1440_px(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path
) -> None:
    # Realistic values: a namespaced topic, a long job id and its run id (neither breaks), and a
    # long error. "Last seen" was cut at 1440 px.
    now = datetime.now(UTC).replace(microsecond=0)
    topic = "prod-eu-west-1.slotflow.runs.events.v1"
    job = "merchant-settlement-payouts-eu-west-1-sepa-instant-batch-0042"
    for index in range(3):
        letter = f"{topic}:2:{1_000_000 + index}"
        parked = DeadLetterStatusChanged(
            dead_letter_id=letter,
            status="parked",
            reason="permanent_error",
            topic=topic,
            source_service="claimer",
            job_id=job,
            run_id=run_id(job, now - timedelta(hours=index + 1)),
            at=now - timedelta(minutes=5 - index),
            error_type="payments.errors.SettlementRejectedByCorrespondentBank",
            error="the correspondent bank rejected the settlement batch: "
            + "IBAN DE89370400440532013000 " * 8,
            last_seen=now - timedelta(minutes=5 - index),
        )
        await emit(DLQ_EVENTS, parked, id=f"{letter}/parked", key=letter)
    async with served(create_app(api_settings)) as base:
        for width in (1440, 1280):
            page, problems = await _page(browser, width=width)
            await page.goto(f"{base}/ui/dlq")
            letters = page.get_by_role("table", name="Dead letters")
            await expect(letters.locator("tbody tr")).to_have_count(3, timeout=20_000)
            header = await letters.get_by_role("columnheader", name="Last seen").bounding_box()
            assert header is not None
            assert header["x"] + header["width"] <= width, (width, header)
            cells = letters.locator("tbody tr td:last-child")
            for index in range(3):
                cell = await cells.nth(index).bounding_box()
                assert cell is not None
                assert cell["x"] + cell["width"] <= width, (width, index, cell)
                # The time itself is on one line, not cut or broken.
                assert await cells.nth(index).evaluate("(td) => td.scrollWidth <= td.clientWidth")
                lines = await cells.nth(index).evaluate(
                    "(td) => { const r = document.createRange(); r.selectNodeContents(td);"
                    " return new Set(Array.from(r.getClientRects()).map((b) => Math.round(b.top))).size; }"
                )
                assert lines == 1, (width, index, lines)
            # Nothing cut inside the table's own scroll box either.
            clipped = await letters.evaluate(
                "(t) => t.parentElement.scrollWidth - t.parentElement.clientWidth"
            )
            assert clipped <= 0, (width, clipped)
            sideways = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert sideways <= 0, (width, sideways)
            if width == 1440:
                await page.screenshot(path=shots / "dashboard-dlq-1440.png", full_page=False)
            assert problems == []
            await page.close()
