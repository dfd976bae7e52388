"""The dashboard's repairs and bulk actions, previewed before they are confirmed, in a real headless
Chromium on the real Kafka and PostgreSQL: a schedule's re-run (a dry run listing what it touches
and leaves out and why, Force saying the effect runs again, then the real command), the mark
dialog from an audit row, and a bulk cancel of workflows from the list.

The api is served on a loopback port; the scene is events on the real topics, projected by the
running app; what the dialogs confirm is read back from the command topics.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from playwright.async_api import Browser, Page, expect

from slotflow.contracts import (
    REGISTRY,
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelWorkflow,
    CompensationRegistered,
    DeadLetterStatusChanged,
    DiscardDeadLetters,
    HistoryEvent,
    JobDue,
    MarkSlots,
    RerunSlots,
    RunCompleted,
    RunDeadLettered,
    ScheduleCreated,
    WorkflowCompleted,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    DLQ_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
)
from slotflow.core.identity import run_id
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, Emitter
from tests.integration.api.helpers import interval
from tests.integration.cli.support import served

HOUR = timedelta(hours=1)
SID = "merchant-payouts"


async def _page(browser: Browser) -> Page:
    return await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 900})


async def _seed_slots(emit: Emitter) -> list[datetime]:
    """An hourly schedule's last three slots: completed, dead-lettered, missed (oldest first)."""
    anchor = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    slots = [anchor - h * HOUR for h in (3, 2, 1)]
    created = ScheduleCreated(
        schedule_id=SID,
        definition=interval(3600, anchor, handler="payouts.pay"),
        paused=False,
        next_fire_at=slots[0],
    )
    await emit(SCHEDULE_EVENTS, created, id=f"{SID}/created", key=SID, occurred_at=slots[0] - HOUR)
    for slot in slots[:2]:
        rid = run_id(SID, slot)
        due = JobDue(run_id=rid, job_id=SID, slot=slot, handler="payouts.pay", fire_at=slot)
        await emit(JOBS_DUE, due, id=rid, key=SID, occurred_at=slot)
    done = RunCompleted(
        run_id=run_id(SID, slots[0]),
        job_id=SID,
        slot=slots[0],
        attempt=1,
        fence_token=1,
        owner="c1",
        started_at=slots[0],
        finished_at=slots[0],
    )
    await emit(RUN_EVENTS, done, id=f"{done.run_id}/1/completed", key=SID)
    dead = RunDeadLettered(
        run_id=run_id(SID, slots[1]),
        job_id=SID,
        slot=slots[1],
        attempt=1,
        fence_token=1,
        owner="c1",
        reason="permanent_error",
    )
    await emit(RUN_EVENTS, dead, id=f"{dead.run_id}/1/dead_lettered", key=SID)
    return slots


def _schedule_page(base: str, slots: list[datetime]) -> str:
    """The schedule's page over exactly the seeded slots (the range a repair of it defaults to)."""
    window = {"from": slots[0].isoformat(), "to": (slots[-1] + timedelta(minutes=1)).isoformat()}
    return f"{base}/ui/schedules/{SID}?" + urlencode(window)


def _published(tail: TopicTail) -> list[Any]:
    return [REGISTRY.parse(e) for e in tail.seen_envelopes()]


async def test_a_rerun_is_previewed_force_says_the_effect_runs_again_and_confirm_sends_it(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path, kafka: KafkaSettings
) -> None:
    slots = await _seed_slots(emit)
    async with served(create_app(api_settings)) as base, TopicTail(kafka, (SCHEDULE_COMMANDS,)) as commands:
        page = await _page(browser)
        await page.goto(_schedule_page(base, slots))
        # The audit flags the dead-lettered and the missed slot, each with its own buttons.
        flagged = page.locator("table", has=page.locator("caption", has_text="Slots the audit flags"))
        await expect(flagged.locator("tbody tr")).to_have_count(2, timeout=30_000)
        await page.locator('[data-repair-range="rerun"]').click()
        dialog = page.locator("dialog[open]")
        await expect(dialog).to_be_visible()
        await expect(dialog.locator("[data-confirm]")).to_be_disabled()

        # No reason: the preview says one is required, and nothing can be confirmed.
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-preview]")).to_contain_text("a reason is required")
        await dialog.locator('input[name="repair-reason"]').fill("the bank lost the transfers (FIN-233)")
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-count]")).to_have_text(
            "Would re-run 2 slot(s); nothing is published until you confirm."
        )
        await expect(dialog.locator("[data-left-out]")).to_contain_text("pass force")

        # Force: the completed slot is taken too, and the dialog says its effect runs again.
        await dialog.locator('input[name="repair-force"]').check()
        await expect(dialog.locator("[data-confirm]")).to_be_disabled()  # changed: preview again
        await expect(dialog.locator("[data-preview]")).to_contain_text("preview again")
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-count]")).to_have_text(
            "Would re-run 3 slot(s); nothing is published until you confirm."
        )
        await expect(dialog.locator("[data-touch]")).to_contain_text(
            "forced: its effect runs AGAIN as a new run"
        )
        await expect(dialog.locator("[data-confirm]")).to_be_enabled()
        assert _published(commands) == []  # previews publish nothing
        await page.screenshot(path=shots / "dashboard-repair-rerun.png", full_page=False)

        await dialog.locator("[data-confirm]").click()
        await expect(dialog.locator("[data-sent]")).to_contain_text(
            "Re-run sent: 3 slot(s) touched (command "
        )
        await assert_eventually(lambda: len(_published(commands)) == 1, timeout=30, message="the re-run")
        (rerun,) = _published(commands)
        assert isinstance(rerun, RerunSlots)
        assert (rerun.slots, rerun.forced, rerun.reason) == (
            (slots[1], slots[2]),
            (slots[0],),
            "the bank lost the transfers (FIN-233)",
        )


async def test_the_mark_dialog_from_an_audit_row_previews_and_marks_that_slot(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path, kafka: KafkaSettings
) -> None:
    slots = await _seed_slots(emit)
    async with served(create_app(api_settings)) as base, TopicTail(kafka, (SCHEDULE_COMMANDS,)) as commands:
        page = await _page(browser)
        await page.goto(_schedule_page(base, slots))
        flagged = page.locator("table", has=page.locator("caption", has_text="Slots the audit flags"))
        missed = flagged.locator("tbody tr", has=page.locator("span", has_text="missed"))
        await expect(missed).to_have_count(1, timeout=30_000)
        # A completed run's row offers a re-run (with Force) but no mark: nothing to mark there.
        runs = page.locator("table", has=page.locator("caption", has_text=f"Runs of {SID}"))
        completed = runs.locator("tbody tr", has=page.locator("span", has_text="completed"))
        await expect(completed.locator('[data-repair="rerun"]')).to_have_count(1)
        await expect(completed.locator('[data-repair="mark"]')).to_have_count(0)

        await missed.locator('[data-repair="mark"]').click()
        dialog = page.locator("dialog[open]")
        await dialog.locator('select[name="repair-mark"]').select_option("skipped")
        await dialog.locator('input[name="repair-reason"]').fill("bank holiday: nothing to pay")
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-count]")).to_have_text(
            "Would mark 1 slot(s); nothing is published until you confirm."
        )
        await page.screenshot(path=shots / "dashboard-repair-mark.png", full_page=False)
        await dialog.locator("[data-confirm]").click()
        await expect(dialog.locator("[data-sent]")).to_contain_text("Mark skipped sent: 1 slot(s) touched")
        await assert_eventually(lambda: len(_published(commands)) == 1, timeout=30, message="the mark")
        (marked,) = _published(commands)
        assert isinstance(marked, MarkSlots)
        assert (marked.slots, marked.mark, marked.reason) == (
            (slots[2],),
            "skipped",
            "bank holiday: nothing to pay",
        )


def _compensating(workflow_id: str) -> list[HistoryEvent]:
    return [
        WorkflowStarted(workflow_id=workflow_id, sequence=1, workflow_type="order_saga", command_id="s"),
        ActivityScheduled(
            workflow_id=workflow_id, sequence=2, activity="payments.charge", run_id=f"{workflow_id}/2"
        ),
        ActivityCompleted(workflow_id=workflow_id, sequence=3, scheduled_sequence=2, result={}),
        CompensationRegistered(workflow_id=workflow_id, sequence=4, for_step=2, activity="payments.refund"),
        ActivityScheduled(
            workflow_id=workflow_id, sequence=5, activity="shipping.book", run_id=f"{workflow_id}/5"
        ),
        ActivityFailed(
            workflow_id=workflow_id,
            sequence=6,
            scheduled_sequence=5,
            error_type="NoCarrier",
            message="x",
            permanent=True,
        ),
        ActivityScheduled(
            workflow_id=workflow_id,
            sequence=7,
            activity="payments.refund",
            run_id=f"{workflow_id}/7",
            compensation=True,
            compensates=2,
        ),
    ]


async def test_a_bulk_cancel_from_the_workflows_list_is_previewed_then_sent(
    api_settings: Settings, emit: Emitter, browser: Browser, shots: Path, kafka: KafkaSettings
) -> None:
    histories: dict[str, list[HistoryEvent]] = {
        w: [WorkflowStarted(workflow_id=w, sequence=1, workflow_type="order_saga", command_id=w)]
        for w in ("order-1041", "order-1042", "order-1040")
    }
    histories["order-1040"].append(WorkflowCompleted(workflow_id="order-1040", sequence=2, result={}))
    histories["order-1043"] = _compensating("order-1043")
    for workflow_id, events in histories.items():
        for event in events:
            await emit(
                WORKFLOW_HISTORY, event, id=history_event_id(workflow_id, event.sequence), key=workflow_id
            )
    async with served(create_app(api_settings)) as base, TopicTail(kafka, (WORKFLOW_COMMANDS,)) as commands:
        page = await _page(browser)
        await page.goto(f"{base}/ui/workflows?type=order_saga")
        rows = page.locator("table tbody tr")
        await expect(rows).to_have_count(4, timeout=30_000)
        await expect(page.locator("tbody span", has_text="compensating")).to_have_count(1, timeout=30_000)
        await page.locator('[data-bulk="cancel"]').click()
        dialog = page.locator("dialog[open]")
        await dialog.locator('input[name="repair-reason"]').fill("carrier outage: stop before shipping")
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-count]")).to_have_text(
            "Would cancel 2 workflow(s); nothing is published until you confirm."
        )
        left_out = dialog.locator("[data-left-out]")
        await expect(left_out).to_contain_text(
            "1 · closed (completed): a workflow that ended takes no cancel"
        )
        await expect(left_out).to_contain_text("1 · compensating already")
        await expect(dialog.locator("[data-left-out-workflows]")).to_contain_text(
            "order-1043 · compensating: compensating already"
        )
        assert _published(commands) == []
        await page.screenshot(path=shots / "dashboard-bulk-cancel.png", full_page=False)
        await dialog.locator("[data-confirm]").click()
        await expect(dialog.locator("[data-sent]")).to_have_text(
            "Cancel sent to 2 workflow(s), one command each."
        )
        await assert_eventually(lambda: len(_published(commands)) == 2, timeout=30, message="two cancels")
        cancels = _published(commands)
        assert all(isinstance(c, CancelWorkflow) for c in cancels)
        assert sorted(c.workflow_id for c in cancels) == ["order-1041", "order-1042"]


async def test_a_bulk_discard_of_the_filtered_letters_is_previewed_then_sent(
    api_settings: Settings, emit: Emitter, browser: Browser, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    now = datetime.now(UTC).replace(microsecond=0)
    for offset, letter_topic in ((1, topic), (2, topic), (3, "slotflow.elsewhere.v1")):
        letter = f"{letter_topic}:0:{offset}"
        parked = DeadLetterStatusChanged(
            dead_letter_id=letter,
            status="parked",
            reason="unknown_type",
            topic=letter_topic,
            source_service="ticker",
            at=now,
            last_seen=now,
        )
        await emit(DLQ_EVENTS, parked, id=f"{letter}/parked", key=letter)
    async with served(create_app(api_settings)) as base, TopicTail(kafka, (DLQ_COMMANDS,)) as commands:
        page = await _page(browser)
        await page.goto(f"{base}/ui/dlq?" + urlencode({"status": "parked", "topic": topic}))
        await expect(page.get_by_role("table", name="Dead letters").locator("tbody tr")).to_have_count(
            2, timeout=30_000
        )
        await page.locator('[data-bulk="discard"]').click()
        dialog = page.locator("dialog[open]")
        await dialog.locator('input[name="repair-reason"]').fill("a producer's test records")
        await dialog.locator("[data-preview-button]").click()
        await expect(dialog.locator("[data-count]")).to_have_text(
            "Would discard 2 of 2 matching dead letter(s); nothing is published until you confirm."
        )
        assert _published(commands) == []
        await dialog.locator("[data-confirm]").click()
        # The dialog waits up to 10 s for the dlq's answer (none runs here), then says what was sent.
        await expect(dialog.locator("[data-sent]")).to_contain_text(
            "Discard sent as command ", timeout=30_000
        )
        await assert_eventually(lambda: len(_published(commands)) == 1, timeout=30, message="the discard")
        (discard,) = _published(commands)
        assert isinstance(discard, DiscardDeadLetters)
        assert (discard.selection.topic, discard.selection.status, discard.reason) == (
            topic,
            "parked",
            "a producer's test records",
        )
