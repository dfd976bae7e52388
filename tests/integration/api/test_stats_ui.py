"""The statistics page in a real headless Chromium: charts drawn from the stats processor's windows
(the processor running on the real broker), with a screenshot for docs/img."""

from pathlib import Path

from aiokafka import AIOKafkaProducer
from playwright.async_api import Browser, expect

from slotflow.contracts.codec import encode
from slotflow.pg.pool import Pool
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH
from tests.integration.api.stats_support import HANDLERS, StatsProcess, past_minute, stored_counts, workload
from tests.integration.api.test_ui import _unlabelled_controls, _watch_errors
from tests.integration.cli.support import served


async def test_stats_page_draws_the_charts(
    api_settings: Settings,
    pg_pool: Pool,
    pg_dsn: str,
    browser: Browser,
    shots: Path,
    tmp_path: Path,
) -> None:
    base = past_minute(40)
    work = workload(base, runs_per_schedule=150)
    kafka = api_settings.kafka
    # Record timestamps as the ticker's relay would give them: a little after each event (JobDue
    # lateness is the record's timestamp minus its fire time), so the lateness chart is realistic.
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for i, (topic, envelope) in enumerate(work.topics(kafka)):
            late_ms = 20 + (i * 37) % 400 + (900 if i % 97 == 0 else 0)
            at_ms = int(envelope.occurred_at.timestamp() * 1000) + late_ms
            await producer.send(topic, encode(envelope), key=envelope.key.encode(), timestamp_ms=at_ms)
        await producer.flush()
    finally:
        await producer.stop()
    worker = StatsProcess(kafka, pg_dsn, tmp_path)
    try:

        async def counted() -> bool:
            assert worker.alive(), worker.log()
            return sum((await stored_counts(pg_dsn)).values()) == sum(work.expected.values())

        await assert_eventually(counted, timeout=240, interval=0.5, message="workload counted")
    finally:
        worker.close()

    async with served(create_app(api_settings)) as url:
        page = await browser.new_page(extra_http_headers=AUTH, viewport={"width": 1280, "height": 900})
        problems = _watch_errors(page)
        await page.goto(f"{url}/ui/stats")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Run statistics")
        await expect(page.locator('nav a[aria-current="page"]')).to_have_text("Statistics")
        throughput = page.locator("svg#throughput-schedule")
        await expect(throughput.locator("polyline")).to_have_count(len(HANDLERS))
        for job in HANDLERS:
            await expect(throughput.locator(f'polyline[data-series="{job}"]')).to_have_count(1)
        await expect(page.locator("svg#failures-handler polyline")).to_have_count(2)
        await expect(page.locator("svg#lateness polyline")).to_have_count(4)  # p50 and p99 per handler
        await expect(page.locator('svg#dlq-inflow rect[data-series="t.orders"]')).to_have_count(1)
        await expect(page.locator('svg#dlq-inflow rect[data-series="t.payments"]')).to_have_count(1)
        await expect(page.get_by_role("img", name="Throughput per schedule")).to_be_visible()
        assert await _unlabelled_controls(page) == []
        await page.screenshot(path=shots / "dashboard-stats.png", full_page=True)
        # The hour view reads the 1-hour windows.
        await page.locator('select[name="size"]').select_option("1h")
        await page.get_by_role("button", name="Show").click()
        await page.wait_for_url("**/ui/stats?size=1h")
        await expect(page.locator("svg#throughput-schedule circle")).not_to_have_count(0)
        assert problems == []
