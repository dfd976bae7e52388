"""The dashboard in a real headless Chromium (Debian's), against the api on real Kafka and PostgreSQL.

Screenshots go to a temporary directory, or to $SLOTFLOW_SCREENSHOT_DIR (docs/img to refresh the
ones in docs/dashboard.md).
"""

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from playwright.async_api import Browser, ConsoleMessage, Page, expect

from slotflow.contracts import NonDeterminismDetected, WorkflowStarted, history_event_id
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    SCHEDULE_COMMANDS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
    TopicSpec,
)
from slotflow.core.identity import run_id
from slotflow.kafka.consumer import Consumer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH
from tests.integration.cli.support import (
    DEAD_LETTERS,
    PAYOUTS,
    STATEMENTS,
    WORKFLOW,
    Scene,
    build_scene,
    produce_live,
    project_scene,
    served,
)

#: A workflow stuck on a non-determinism, added to the scene for the attention filter.
STUCK = "order-2002"


async def _seeded(base: str, settings: Settings, pool: Pool) -> Scene:
    scene = build_scene()
    await project_scene(pool, settings.api.db_schema, scene.facts)
    await produce_live(settings.kafka, scene.now, scene.hour)

    async with httpx.AsyncClient(base_url=base, timeout=10, headers=AUTH) as http:

        async def projected() -> bool:
            schedules = (await http.get("/v1/schedules")).json()["items"]
            letters = (await http.get("/v1/dlq")).json()["items"]
            return len(schedules) == 3 and len(letters) == 2

        await assert_eventually(projected, timeout=30, message="live events projected")
    return scene


def _watch_errors(page: Page) -> list[str]:
    """Console errors and uncaught exceptions (a CSP violation shows up here too)."""
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda err: problems.append(str(err)))
    return problems


async def _unlabelled_controls(page: Page) -> list[str]:
    found: Any = await page.evaluate(
        """() => Array.from(document.querySelectorAll('input, select, button'))
            .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                            && !(el.tagName === 'BUTTON' && el.textContent.trim()))
            .map((el) => el.outerHTML)"""
    )
    return [str(item) for item in found]


async def _command(kafka: KafkaSettings, spec: TopicSpec, command_id: str) -> dict[str, Any]:
    """The envelope ``command_id`` on ``spec``'s topic, once it is there."""
    topic = kafka.topic(spec)
    async with Consumer(kafka, topic, group_id=unique_name("ui-test"), client_id="ui-test") as consumer:

        async def find() -> dict[str, Any] | None:
            for record in await consumer.poll(timeout_ms=500):
                envelope = decode(record.value)
                if envelope.id == command_id:
                    return {"type": envelope.type, "key": envelope.key, "data": envelope.data}
            return None

        found: dict[str, Any] = await assert_eventually(find, timeout=30, message=f"{command_id} on {topic}")
        return found


async def _published_id(page: Page) -> str:
    status = page.get_by_role("status")
    await expect(status).to_contain_text("published")
    match = re.search(r"command (\S+) published", await status.inner_text())
    assert match is not None, await status.inner_text()
    return match.group(1)


async def test_dashboard_pages_and_redrive_in_chromium(
    api_settings: Settings, pg_pool: Pool, browser: Browser, shots: Path
) -> None:
    async with served(create_app(api_settings)) as base:
        scene = await _seeded(base, api_settings, pg_pool)
        page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 860})
        problems = _watch_errors(page)

        # The root redirects to the schedules page, which lists every schedule with its next slots.
        await page.goto(f"{base}/")
        assert page.url == f"{base}/ui/"
        await expect(page.get_by_role("heading", level=1)).to_have_text("Schedules")
        table = page.get_by_role("table", name="Schedules and their next slots")
        await expect(table.get_by_role("row")).to_have_count(4)
        payouts_row = table.get_by_role("row").filter(has_text=PAYOUTS)
        await expect(payouts_row).to_contain_text("cron 0 * * * * (UTC)")
        await expect(payouts_row.locator("ul.slots li")).to_have_count(5)
        statements_row = table.get_by_role("row").filter(has_text=STATEMENTS)
        await expect(statements_row).to_contain_text("paused bank maintenance")
        # Paused until resume_at: only the slots after it are promised, with their local times.
        await expect(statements_row).to_contain_text("(resumes ")
        await expect(statements_row).to_contain_text("local")
        await expect(page.locator('nav a[aria-current="page"]')).to_have_text("Schedules")
        # Is it healthy? The newest run (linked to its page) and the failure streak, per schedule.
        newest = run_id(PAYOUTS, scene.hour)
        await expect(payouts_row.locator(f'a[data-last-run="{newest}"]')).to_have_attribute(
            "href", f"/ui/runs/{quote(newest, safe='')}"
        )
        await expect(payouts_row).to_contain_text("running")
        await expect(statements_row).to_contain_text("none yet")
        await page.screenshot(path=shots / "dashboard-schedules.png", full_page=True)

        # A schedule's runs timeline: one marker per recorded run, attempts stacked, the audit lane below.
        await payouts_row.get_by_role("link", name=PAYOUTS).click()
        await page.wait_for_url(f"{base}/ui/schedules/{PAYOUTS}")
        # Without ?window= the window fits the schedule: 50 of its hourly intervals.
        caption = (
            await page.get_by_role("table", name=re.compile(f"^Runs of {PAYOUTS}"))
            .locator("caption")
            .inner_text()
        )
        bounds = re.findall(r"(\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d(?:\.\d+)?)?) UTC", caption)
        shown_from, shown_to = (datetime.fromisoformat(f"{b}+00:00") for b in bounds)
        assert shown_to - shown_from == timedelta(hours=50), caption
        await page.get_by_role("link", name="12h").click()
        # The window is in the URL, so the link can be shared and reloads to the same view.
        await page.wait_for_url(f"{base}/ui/schedules/{PAYOUTS}?window=12h")
        await expect(page.locator('p.pager strong[aria-current="true"]')).to_have_text("12h")
        await expect(page.locator("svg.timeline g.run")).to_have_count(7)
        assert await page.locator('svg.timeline g.run[data-state="completed"]').count() == 5
        assert await page.locator('svg.timeline g.run[data-state="dead_lettered"]').count() == 1
        assert await page.locator('svg.timeline g.run[data-state="running"]').count() == 1
        retried = page.locator("svg.timeline g.run").filter(has_text="2 attempt(s)")
        assert await retried.count() == 2  # the retried run and the duplicated one
        await expect(page.locator('svg.timeline g.expected[data-status="missed"]')).to_have_count(1)
        audit = page.locator("p.audit")
        await expect(audit).to_contain_text("1 missed")
        await expect(audit).to_contain_text("1 late")
        await expect(audit).to_contain_text("1 skipped by policy")
        await expect(audit).to_contain_text("1 duplicated effect")
        runs = page.get_by_role("table", name=re.compile(f"^Runs of {PAYOUTS}"))
        await expect(runs).to_contain_text("TimeoutError: bank API timed out")
        await expect(runs).to_contain_text("CardDeclined: card declined by issuer")
        # Retrying and late, failed and dead-lettered: four states, four colours.
        swatch = "(state) => getComputedStyle(document.querySelector(`.legend .c-${state}`)).backgroundColor"
        colours = {
            state: await page.evaluate(swatch, state)
            for state in ("retrying", "late", "failed", "dead_lettered")
        }
        assert len(set(colours.values())) == 4, colours
        # The runs table: a state filter and pages, both in the URL.
        await expect(page.get_by_role("group", name="Pages of runs")).to_contain_text("Page 1 of 1 (7 runs)")
        await page.get_by_label("Runs in state").select_option("dead_lettered")
        await page.wait_for_url(re.compile(r"state=dead_lettered"))
        await expect(runs.get_by_role("row")).to_have_count(2)
        await expect(runs).to_contain_text("CardDeclined")
        await page.goto(f"{base}/ui/schedules/{PAYOUTS}?window=12h&per_page=5")
        await expect(page.get_by_role("group", name="Pages of runs")).to_contain_text("Page 1 of 2 (7 runs)")
        await expect(runs.get_by_role("row")).to_have_count(6)
        await page.get_by_role("link", name="Older").click()
        await page.wait_for_url(re.compile(r"page=2"))
        await expect(runs.get_by_role("row")).to_have_count(3)
        await page.get_by_role("link", name="Newer").click()
        await page.wait_for_url(re.compile(r"window=12h&per_page=5$"))
        await page.goto(f"{base}/ui/schedules/{PAYOUTS}?window=12h")
        await expect(runs.get_by_role("row")).to_have_count(8)
        await page.screenshot(path=shots / "dashboard-schedule.png", full_page=True)
        await page.get_by_role("button", name="Trigger now").click()
        trigger = await _command(api_settings.kafka, SCHEDULE_COMMANDS, await _published_id(page))
        assert (trigger["type"], trigger["key"], trigger["data"]) == (
            "schedule.trigger",
            PAYOUTS,
            {"schedule_id": PAYOUTS},
        )

        # Every marker of the timeline and every row of the runs table opens the run's page.
        retried_id = run_id(PAYOUTS, scene.hour - timedelta(hours=6))
        marker = page.locator(f'svg.timeline a[href="/ui/runs/{quote(retried_id, safe="")}"] g.run')
        await expect(marker).to_have_count(1)
        await runs.get_by_role("link", name=retried_id).click()
        await page.wait_for_url(f"{base}/ui/runs/{quote(retried_id, safe='')}")
        await expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {retried_id}")
        await expect(page.locator("dl.facts").first).to_contain_text("completed")
        await expect(page.locator("pre.json").first).to_contain_text('"currency": "EUR"')
        attempts = page.locator("section.attempt")
        await expect(attempts).to_have_count(2)
        first = attempts.nth(0)
        await expect(first).to_contain_text("TimeoutError: bank API timed out")
        await expect(first.get_by_label("Log of attempt 1")).to_contain_text(
            "INFO payouts: attempt 1: paying merchant m-1042"
        )
        await expect(first.get_by_label("Traceback of attempt 1")).to_contain_text(
            'File "payouts.py", line 12'
        )
        await expect(attempts.nth(1)).to_contain_text("The handler logged nothing in this attempt.")
        await page.screenshot(path=shots / "dashboard-run.png", full_page=True)
        await page.get_by_role("link", name=PAYOUTS).click()
        await page.wait_for_url(f"{base}/ui/schedules/{PAYOUTS}")

        # A workflow: its saga state (compensations in the order they run), steps, pending work, history.
        await page.goto(f"{base}/ui/workflows/{WORKFLOW}")
        await expect(page.locator("dl.facts")).to_contain_text("compensating")
        compensations = page.get_by_role("list", name="Compensations").get_by_role("listitem")
        await expect(compensations).to_have_count(2)
        await expect(compensations.nth(0)).to_contain_text("payments.refund done")
        await expect(compensations.nth(0)).to_contain_text("undoes #5 payments.charge")
        await expect(compensations.nth(1)).to_contain_text("inventory.release running")
        steps = page.get_by_role("table", name=f"Steps of {WORKFLOW}")
        await expect(steps.get_by_role("row")).to_have_count(6)
        await expect(steps).to_contain_text("NoCarrier: no carrier serves 10115")
        await expect(steps).to_contain_text("undoes #2")
        activities = page.get_by_role("table", name=f"Activities of {WORKFLOW}")
        await expect(activities.get_by_role("row")).to_have_count(6)
        pending = page.get_by_role("table", name="Pending activities")
        await expect(pending).to_contain_text("inventory.release")
        await expect(pending).to_contain_text("running")
        history = page.get_by_role("table", name=f"History of {WORKFLOW}, in order")
        await expect(history).to_contain_text("to undo #5: payments.refund")
        await expect(history).to_contain_text("workflow.start")
        await page.screenshot(path=shots / "dashboard-workflow.png", full_page=True)
        await page.get_by_label("Signal", exact=True).fill("approve")
        await page.get_by_label("Payload (JSON)").fill("{oops")
        await page.get_by_role("button", name="Send signal").click()
        await expect(page.get_by_role("status")).to_contain_text("The signal payload is not valid JSON")
        await page.get_by_label("Payload (JSON)").fill('{"by": "ops"}')
        await page.get_by_role("button", name="Send signal").click()
        signal_id = await _published_id(page)
        signal = await _command(api_settings.kafka, WORKFLOW_COMMANDS, signal_id)
        assert signal["type"] == "workflow.signal"
        assert signal["data"] == {"workflow_id": WORKFLOW, "signal": "approve", "payload": {"by": "ops"}}
        await page.get_by_label("Reason").fill("stuck carrier")
        await page.get_by_role("button", name="Terminate workflow").click()
        # The status line still names the signal until the terminate's answer replaces it.
        await expect(page.get_by_role("status")).not_to_contain_text(signal_id)
        terminate = await _command(api_settings.kafka, WORKFLOW_COMMANDS, await _published_id(page))
        assert terminate["type"] == "workflow.terminate"
        assert terminate["data"] == {"workflow_id": WORKFLOW, "reason": "stuck carrier"}

        # Needs attention: a workflow stuck on a non-determinism is listed, the compensating one not.
        stuck = Scene(now=scene.now, hour=scene.hour)
        for event in (
            WorkflowStarted(
                workflow_id=STUCK, sequence=1, workflow_type="orders.checkout", command_id="c-stuck"
            ),
            NonDeterminismDetected(
                workflow_id=STUCK, sequence=2, at_sequence=2, expected="x", got="time.time"
            ),
        ):
            stuck.add(
                WORKFLOW_HISTORY,
                event,
                id=history_event_id(STUCK, event.sequence),
                key=STUCK,
                occurred_at=scene.now,
            )
        await project_scene(pg_pool, api_settings.api.db_schema, stuck.facts)
        await page.goto(f"{base}/ui/workflows")
        await expect(page.get_by_role("table", name="Workflows").get_by_role("row")).to_have_count(3)
        await page.get_by_label("Needs attention (waiting longer than)").fill("1h")
        await page.get_by_role("button", name="Apply").click()
        await page.wait_for_url(re.compile(r"attention=1h"))
        listed = page.get_by_role("table", name="Workflows").get_by_role("row")
        await expect(listed).to_have_count(2)
        await expect(listed.nth(1)).to_contain_text(STUCK)
        await expect(listed.nth(1)).to_contain_text("stuck")

        # The DLQ: a redrive button publishes RedriveDeadLetters for exactly that dead letter.
        await page.goto(f"{base}/ui/dlq")
        letters = page.get_by_role("table", name="Dead letters")
        await expect(letters.get_by_role("row")).to_have_count(3)
        await expect(letters).to_contain_text("CardDeclined: card declined by issuer")
        # Every row's buttons are on screen, on a laptop's 1024 px too, without scrolling sideways.
        for width in (1280, 1024):
            await page.set_viewport_size({"width": width, "height": 860})
            for letter in DEAD_LETTERS:
                for action in ("Redrive", "Discard"):
                    box = await page.get_by_role("button", name=f"{action} {letter}").bounding_box()
                    assert box is not None
                    assert box["x"] + box["width"] <= width, (width, action, letter, box)
        await page.set_viewport_size({"width": 1280, "height": 860})
        dead_run = run_id(PAYOUTS, scene.hour - timedelta(hours=3))
        await expect(letters.get_by_role("link", name=dead_run)).to_have_attribute(
            "href", f"/ui/runs/{quote(dead_run, safe='')}"
        )
        await page.get_by_role("button", name=f"Redrive {DEAD_LETTERS[1]}").click()
        status = page.get_by_role("status")
        redrive_id = await _published_id(page)
        await expect(page.get_by_role("button", name=f"Redrive {DEAD_LETTERS[1]}")).to_be_disabled()
        await page.evaluate("document.querySelectorAll('.scroll').forEach((box) => { box.scrollLeft = 0; })")
        await page.screenshot(path=shots / "dashboard-dlq.png", full_page=True)

        published = await _command(api_settings.kafka, DLQ_COMMANDS, redrive_id)
        assert published["type"] == "dlq.redrive"
        assert published["key"] == DEAD_LETTERS[1]
        assert published["data"]["selection"]["ids"] == [DEAD_LETTERS[1]]
        assert published["data"]["limit"] == 1

        # Discarding without a reason is refused in the page; nothing is sent.
        await page.get_by_role("button", name=f"Discard {DEAD_LETTERS[0]}").click()
        await expect(status).to_have_text("Give a discard reason first.")

        for path in (
            "/ui/",
            f"/ui/schedules/{PAYOUTS}",
            f"/ui/workflows/{WORKFLOW}",
            "/ui/dlq",
            "/ui/workflows",
            f"/ui/runs/{quote(retried_id, safe='')}",
        ):
            await page.goto(f"{base}{path}")
            await expect(page.locator("#content")).to_have_attribute("aria-busy", "false")
            assert await _unlabelled_controls(page) == [], path
            assert await page.get_by_role("heading", level=1).count() == 1
        assert problems == []


async def test_unknown_pages_say_not_found_and_assets_are_local(
    api_settings: Settings, browser: Browser
) -> None:
    async with served(create_app(api_settings)) as base:
        page = await browser.new_page(extra_http_headers=AUTH)
        problems = _watch_errors(page)
        external: list[str] = []
        page.on(
            "request",
            lambda request: external.append(request.url) if not request.url.startswith(base) else None,
        )
        await page.goto(f"{base}/ui/schedules/no-such-schedule")
        await expect(page.locator("#content")).to_contain_text("Schedule no-such-schedule was not found.")
        await page.goto(f"{base}/ui/workflows/no-such-workflow")
        await expect(page.locator("#content")).to_contain_text("Workflow no-such-workflow was not found.")
        assert external == []
        assert problems == [] or all("404" in problem for problem in problems)
        async with httpx.AsyncClient(base_url=base, headers=AUTH) as http:
            response = await http.get("/ui/dlq")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            assert (await http.get("/ui/static/common.js")).status_code == 200
            openapi = (await http.get("/v1/openapi.json")).json()
            assert not any(path.startswith("/ui") for path in openapi["paths"])
