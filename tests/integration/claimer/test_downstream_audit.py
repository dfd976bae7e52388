"""The slot audit of a schedule whose runs wait for a downstream, on the real stack.

A schedule fires every second into a handler that declares "bank-api", which an operator has
opened: the ticker fires every slot on time and the claimer holds every run. The audit says
`held` for those slots (not `missed`, not `fired`), with the reason. After the operator closes
the downstream every held run completes once, and the audit then judges each by when it
completed: `late`, with the hold in the detail. Nothing is missed at any point.
"""

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import CreateSchedule, DeleteSchedule, IntervalSpec, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.ticker.support import db_now, send, tickers

SECOND = timedelta(seconds=1)


async def _audit(api: httpx.AsyncClient, start: datetime, end: datetime) -> dict[str, Any]:
    answer = await api.get(
        "/v1/audit", params={"schedule": "held-pay", "from": start.isoformat(), "to": end.isoformat()}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_held_slots_are_held_then_late_never_missed(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    calls: list[str] = []

    async def pay(ctx: RunContext) -> dict[str, str]:
        calls.append(ctx.run_id)
        return {"paid": ctx.run_id}

    registry = HandlerRegistry()
    registry.register("audit.bank", pay, downstreams=["bank-api"])
    async with tickers(kafka, pg_dsn):
        await start_claimer(registry_=registry, downstream_cooldown_seconds=1.0)
        opened = await api.post("/v1/downstreams/bank-api/open?wait=20", json={"reason": "bank maintenance"})
        assert opened.status_code == 200, opened.text
        start = await db_now(db) - SECOND
        every_second = ScheduleDefinition(spec=IntervalSpec(every=SECOND), handler="audit.bank")
        await send(producer, kafka, CreateSchedule(schedule_id="held-pay", definition=every_second))
        await asyncio.sleep(4)
        await send(producer, kafka, DeleteSchedule(schedule_id="held-pay"))
        end = await db_now(db) + SECOND

        async def held_slots() -> dict[str, Any] | None:
            body = await _audit(api, start, end)
            runs = (await api.get("/v1/runs", params={"job_id": "held-pay", "limit": 100})).json()["items"]
            settled = runs and all(r["state"] == "held" for r in runs)
            return body if settled and body["summary"]["held"] == len(runs) >= 3 else None

        during = await assert_eventually(held_slots, timeout=60.0, message="held slots not audited as held")
        assert during["summary"]["missed"] == 0
        assert during["summary"]["fired"] == 0
        held = [s for s in during["slots"] if s["status"] == "held"]
        assert all("operator_open:bank-api" in s["detail"] for s in held), held
        assert calls == []

        await asyncio.sleep(5)  # held past the late threshold (5 s)
        closed = await api.post("/v1/downstreams/bank-api/close?wait=20", json={"reason": "bank is back"})
        assert closed.status_code == 200, closed.text

        async def completed() -> dict[str, Any] | None:
            # Runs first, then the audit: read the other way round, an audit from before the last
            # completion could pass with runs read after it (seen under load: a slot still running).
            runs = (await api.get("/v1/runs", params={"job_id": "held-pay", "limit": 100})).json()["items"]
            body = await _audit(api, start, end)
            done = runs and all(r["state"] == "completed" for r in runs)
            return body if done and body["summary"]["held"] == 0 else None

        after = await assert_eventually(completed, timeout=60.0, message="held runs did not complete")

    assert after["summary"]["missed"] == 0
    assert after["summary"]["duplicated_effect"] == 0
    late = [s for s in after["slots"] if s["status"] == "late"]
    assert len(late) == len(held), after["slots"]
    assert all("held for a downstream; completed" in s["detail"] for s in late), late
    assert sorted(calls) == sorted({s["run_id"] for s in held})
