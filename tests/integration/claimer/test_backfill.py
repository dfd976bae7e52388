"""A backfill on the real stack (ticker, claimer, api): every slot runs, in slot order, at most
`max_concurrent` at once, whatever the schedule's own overlap policy; the api's backfill report
is the dry run before and the summary after."""

import asyncio
import functools
from datetime import timedelta
from typing import Any

import httpx
import pytest

from slotflow.contracts import Backfill, CreateSchedule, IntervalSpec, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.ticker.support import db_now, send, tickers


class Tracker:
    """A handler that takes a while and records the order and overlap of its runs."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.started: list[str] = []
        self.running = 0
        self.peak = 0
        self.fail = fail or set()

    async def __call__(self, ctx: RunContext) -> object:
        self.started.append(ctx.run_id)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(0.15)
            if len(self.started) in self.fail:
                raise ValueError("this slot's data is bad")
            return {"ok": True}
        finally:
            self.running -= 1


@pytest.mark.parametrize("max_concurrent", [1, 3])
async def test_a_backfill_runs_every_slot_in_order_within_its_concurrency(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
    max_concurrent: int,
) -> None:
    tracker = Tracker()
    registry.register("reports.slow", tracker)
    async with tickers(kafka, pg_dsn):
        await start_claimer()
        now = (await db_now(db)).replace(microsecond=0)
        # The schedule's own overlap policy is `skip`: under it, a burst of due slots runs one.
        definition = ScheduleDefinition(
            spec=IntervalSpec(every=timedelta(minutes=1)), handler="reports.slow", overlap="skip"
        )
        await send(producer, kafka, CreateSchedule(schedule_id="hourly", definition=definition))
        start, end = now - timedelta(minutes=12), now - timedelta(minutes=2)

        async def planned() -> dict[str, Any] | None:
            answer = await api.get(
                "/v1/schedules/hourly/backfill", params={"from": start.isoformat(), "to": end.isoformat()}
            )
            return answer.json() if answer.status_code == 200 else None

        dry = await assert_eventually(planned, timeout=30, message="the schedule projected")
        assert dry["expected"] == 10
        assert dry["refused"] is None
        assert dry["not_started"] == 10
        assert not dry["finished"]
        slots = [slot["run_id"] for slot in dry["slots"]]
        assert slots == sorted(slots)

        await send(
            producer,
            kafka,
            Backfill(schedule_id="hourly", start=start, end=end, max_concurrent=max_concurrent),
        )

        async def finished() -> dict[str, object] | None:
            report = await planned()
            return report if report is not None and report["finished"] else None

        summary = await assert_eventually(finished, timeout=60, message="every backfilled slot finished")
    assert (summary["completed"], summary["skipped"], summary["failed"]) == (10, 0, 0)
    assert sorted(tracker.started) == slots
    assert tracker.peak == max_concurrent
    if max_concurrent == 1:
        # One after another, in slot order.
        assert tracker.started == slots


async def test_backfills_in_flight_per_schedule_are_capped_with_a_clear_error(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    # Issue 20: a backfill of up to 10,000 slots could be repeated at will. Two may be in flight
    # per schedule (SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT); the third is refused until one finishes.
    gate = asyncio.Event()

    async def gated(ctx: RunContext) -> str:
        await gate.wait()
        return "done"

    registry.register("reports.gated", gated)
    async with tickers(kafka, pg_dsn):
        await start_claimer()
        now = (await db_now(db)).replace(second=0, microsecond=0)
        definition = ScheduleDefinition(
            spec=IntervalSpec(every=timedelta(minutes=1)), handler="reports.gated"
        )
        await send(producer, kafka, CreateSchedule(schedule_id="capped", definition=definition))
        ranges = [(now - timedelta(minutes=m + 2), now - timedelta(minutes=m)) for m in (20, 10, 4)]

        def body(index: int) -> dict[str, Any]:
            start, end = ranges[index]
            return {
                "start": start.isoformat(),
                "end": end.isoformat(),
                "overlap": "allow",
                "max_concurrent": 2,
            }

        async def report(index: int) -> dict[str, Any] | None:
            start, end = ranges[index]
            answer = await api.get(
                "/v1/schedules/capped/backfill", params={"from": start.isoformat(), "to": end.isoformat()}
            )
            return answer.json() if answer.status_code == 200 else None

        await assert_eventually(lambda: report(0), timeout=30, message="the schedule projected")
        for index in (0, 1):
            sent = await api.post(
                "/v1/schedules/capped/backfill", json=body(index), headers={"Idempotency-Key": f"bf-{index}"}
            )
            assert sent.status_code == 202, sent.text

        async def runs_shown(index: int) -> bool:
            shown = await report(index)
            return shown is not None and shown["not_started"] == 0 and not shown["finished"]

        # Both are in flight on their runs' account now, whatever time has passed.
        for index in (0, 1):
            await assert_eventually(
                functools.partial(runs_shown, index), timeout=30, message=f"backfill {index} running"
            )
        refused = await api.post(
            "/v1/schedules/capped/backfill", json=body(2), headers={"Idempotency-Key": "bf-2"}
        )
        assert refused.status_code == 409, refused.text
        assert "has 2 backfills in flight" in refused.json()["detail"]
        assert "SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT = 2" in refused.json()["detail"]
        # A client retrying its own command with the same key is not refused for it.
        again = await api.post(
            "/v1/schedules/capped/backfill", json=body(1), headers={"Idempotency-Key": "bf-1"}
        )
        assert again.status_code == 202, again.text
        # Nothing was published for the refused one.
        assert (await api.get("/v1/commands/bf-2")).json()["status"] == "unknown"

        gate.set()

        async def third_accepted() -> bool:
            answer = await api.post(
                "/v1/schedules/capped/backfill", json=body(2), headers={"Idempotency-Key": "bf-2"}
            )
            return answer.status_code == 202

        await assert_eventually(
            third_accepted, timeout=60, message="a backfill accepted once the others finished"
        )

        async def third_finished() -> bool:
            shown = await report(2)
            return shown is not None and bool(shown["finished"])

        await assert_eventually(third_finished, timeout=60, message="the third backfill finished")
