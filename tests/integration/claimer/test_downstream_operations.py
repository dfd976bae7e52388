"""An operator's hand on a downstream, through the api and Kafka, on the real stack.

The api (in-process, projector included), a ticker and a claimer run against the real broker and
database. An operator opens "bank-api" by hand before any run calls it: every run that needs it is
held (none calls the bank, none spends an attempt), the held runs show in the api in slot order,
and each command is answered (the api's `?wait=` returns the claimer's acceptance). Closing it
brings the held runs forward: each completes once, and the runs of each job call the bank in
slot order. Every change reaches the api as a DownstreamChanged event; a downstream's own
settings apply to its decisions; bad input gets a 4xx with a message.
"""

import time
from datetime import timedelta
from typing import Any

import httpx

from slotflow.contracts import RetryPolicy
from slotflow.contracts.topics import DOWNSTREAM_EVENTS
from slotflow.core.downstreams import Breaker
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, TopicReader, job_due, publish
from tests.integration.ticker.support import start_ticker, stop_ticker

JOBS = 3
SLOTS = 5
SETTINGS: dict[str, Any] = {
    "downstream_cooldown_seconds": 1.0,
    "downstream_window_seconds": 2.0,
    "downstream_report_interval_seconds": 0.5,
}
POLICY = RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=500), max_attempts=2)


class Bank:
    """Records every call that reaches it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, float]] = []  # run id, job id, slot, when

    async def __call__(self, ctx: RunContext) -> dict[str, str]:
        self.calls.append((ctx.run_id, ctx.job_id, ctx.slot, time.monotonic()))
        return {"paid": ctx.run_id}


async def test_an_operator_opens_and_closes_a_downstream(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    pg_dsn: str,
    start_claimer: StartClaimer,
    api: httpx.AsyncClient,
) -> None:
    bank = Bank()
    registry = HandlerRegistry()
    registry.register("test.bank", bank, downstreams=["bank-api"])
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        await start_claimer(registry_=registry, **SETTINGS)

        # Opened by hand before anything called it; the claimer answers the command.
        opened = await api.post(
            "/v1/downstreams/bank-api/open?wait=20", json={"reason": "bank maintenance, INC-1"}
        )
        assert opened.status_code == 200, opened.text
        assert opened.json()["status"] == "accepted"
        row = await db.fetchrow("SELECT state, manual FROM claimer.downstreams WHERE name = 'bank-api'")
        assert row is not None
        assert (row["state"], row["manual"]) == ("open", True)

        # Slots published newest first, so arrival order is not slot order.
        jobs = [
            job_due(f"pay-{j}", handler="test.bank", slot=SLOT + timedelta(minutes=s), retry=POLICY)
            for s in reversed(range(SLOTS))
            for j in range(JOBS)
        ]
        await publish(producer, kafka, jobs)

        async def all_held() -> list[dict[str, Any]] | None:
            found = await api.get("/v1/downstreams/bank-api")
            if found.status_code != 200:
                return None
            body = found.json()
            return body if len(body["held_runs"]) == JOBS * SLOTS and body["held"] == JOBS * SLOTS else None

        view = await assert_eventually(all_held, timeout=60.0, message="held runs never showed in the api")
        assert view["state"] == "open"
        assert view["manual"] is True
        slots = [h["slot"] for h in view["held_runs"]]
        assert slots == sorted(slots), "held runs are listed in slot order"
        assert {h["held_reason"] for h in view["held_runs"]} <= {
            "operator_open:bank-api",
            "slot_order:bank-api",
        }
        assert bank.calls == [], "an operator's open lets no call through"
        # Held is not failed: no attempt spent, nothing dead-lettered; the runs api says `held`.
        spent = await db.fetchval("SELECT max(attempt - round_start + 1) FROM claimer.runs")
        assert spent == 0, "a held run keeps its attempt (the next one is the first of its budget)"
        held_runs = await api.get("/v1/runs", params={"state": "held", "limit": 100})
        assert held_runs.status_code == 200, held_runs.text
        assert len(held_runs.json()["items"]) == JOBS * SLOTS

        # Held open: cool-downs pass and no probe goes out.
        await _wait_seconds(db, 2.5)
        assert bank.calls == []

        # Closing resumes every held run once; each job's runs call the bank in slot order.
        closed = await api.post("/v1/downstreams/bank-api/close?wait=20", json={"reason": "bank is back"})
        assert closed.status_code == 200, closed.text

        async def all_completed() -> bool | None:
            done = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'completed'")
            return done == JOBS * SLOTS or None

        await assert_eventually(all_completed, timeout=60.0, message="held runs not completed after close")
        run_ids = [run_id for run_id, *_ in bank.calls]
        assert sorted(run_ids) == sorted(j.run_id for j in jobs), "each held run called the bank once"
        for j in range(JOBS):
            called = [slot for _, job_id, slot, _ in bank.calls if job_id == f"pay-{j}"]
            assert called == sorted(called), f"pay-{j} resumed out of slot order: {called}"
        dead = await db.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'dead_lettered'")
        assert dead == 0

        # Every change reached the api as an event: the operator's open and close, with their commands.
        async def changes_seen() -> list[dict[str, Any]] | None:
            body = (await api.get("/v1/downstreams/bank-api")).json()
            causes = [c["cause"] for c in body["changes"]]
            return body["changes"] if "operator_close" in causes and body["state"] == "closed" else None

        changes = await assert_eventually(changes_seen, timeout=30.0, message="changes not projected")
        by_cause = {c["cause"]: c for c in changes}
        assert by_cause["operator_open"]["command_id"] == opened.json()["command_id"]
        assert by_cause["operator_open"]["reason"] == "bank maintenance, INC-1"
        assert by_cause["operator_close"]["command_id"] == closed.json()["command_id"]
        assert by_cause["operator_close"]["held"] == JOBS * SLOTS
        recorded = await db.fetchval(
            "SELECT count(*) FROM claimer.downstream_changes WHERE name = 'bank-api'"
        )
        assert recorded == len(changes)

        # A downstream's own settings: accepted, stored, reported, and applied to its decisions.
        configured = await api.put(
            "/v1/downstreams/bank-api/settings?wait=20", json={"failure_rate": 0.25, "cooldown_seconds": 30}
        )
        assert configured.status_code == 200, configured.text
        stored = await db.fetchval("SELECT settings->>'cooldown_seconds' FROM claimer.downstreams")
        assert float(stored) == 30.0

        async def settings_shown() -> bool | None:
            body = (await api.get("/v1/downstreams")).json()
            shown = bool(body) and body[0]["settings"] == {"failure_rate": 0.25, "cooldown_seconds": 30.0}
            return shown or None

        await assert_eventually(settings_shown, timeout=30.0, message="settings not shown")

        # Bad input: a clear 4xx, nothing published; an unknown downstream's close is rejected.
        bad = await api.put("/v1/downstreams/bank-api/settings", json={"failure_rate": 2})
        assert bad.status_code == 422
        assert "failure_rate" in bad.text
        no_reason = await api.post("/v1/downstreams/bank-api/open", json={})
        assert no_reason.status_code == 422
        assert "reason" in no_reason.text
        unknown = await api.post("/v1/downstreams/no-such-api/close?wait=20", json={"reason": "tidy"})
        assert unknown.status_code == 409, unknown.text
        assert "no downstream named 'no-such-api'" in unknown.json()["detail"]
        missing = await api.get("/v1/downstreams/no-such-api")
        assert missing.status_code == 404
    finally:
        await stop_ticker(ticker)


async def _wait_seconds(db: Pool, seconds: float) -> None:
    """Let ``seconds`` pass by the database clock (the claimers' clock)."""
    start = await db.fetchval("SELECT clock_timestamp()")

    async def passed() -> bool | None:
        now = await db.fetchval("SELECT clock_timestamp()")
        return (now - start).total_seconds() >= seconds or None

    await assert_eventually(passed, timeout=seconds + 30.0, message="the database clock stood still")


async def test_an_idle_downstream_is_reported_once_then_when_it_changes(
    kafka: KafkaSettings, db: Pool, start_claimer: StartClaimer, api: httpx.AsyncClient
) -> None:
    """Reports keep the views current without filling the events topic for idle downstreams."""
    await start_claimer(downstream_report_interval_seconds=0.3)
    async with TopicReader(kafka, DOWNSTREAM_EVENTS) as events:
        configured = await api.put("/v1/downstreams/ledger-api/settings?wait=20", json={"probes": 2})
        assert configured.status_code == 200, configured.text
        await events.wait_for("downstream.reported", count=1)
        await _wait_seconds(db, 2.0)  # several report intervals, nothing happening
        await events.drain()
        assert len(events.of_type("downstream.reported")) == 1
        opened = await api.post("/v1/downstreams/ledger-api/open?wait=20", json={"reason": "drill"})
        assert opened.status_code == 200, opened.text
        reports = await events.wait_for("downstream.reported", count=2)
        assert reports[-1].data["state"] == "open"
        assert reports[-1].data["manual"] is True


async def test_a_change_is_newer_than_a_report_read_before_it(db: Pool, start_claimer: StartClaimer) -> None:
    """A report reads the row while an operator's close waits for the lock: the close's time is
    later than the report's, so the read model (newest fact wins) shows the close, not the report's
    older "open". Before, the change took its transaction's start as its time and lost to it."""
    claimer = await start_claimer(downstream_report_interval_seconds=3600)
    gate = claimer.gate
    async with db.acquire() as conn, conn.transaction():
        locked, now = await gate.lock(conn, ["bank-api"])
        await gate.move(
            conn, "bank-api", locked["bank-api"], Breaker("open", now, manual=True), reason="drill"
        )
    async with db.acquire() as closing, closing.transaction():
        await closing.fetchval("SELECT now()")  # the close's transaction has begun
        await _wait_seconds(db, 0.05)
        assert await gate.report(0.0) == 1  # reads "open" on its own connection, and commits
        locked, _ = await gate.lock(closing, ["bank-api"])
        staged = await gate.move(closing, "bank-api", locked["bank-api"], Breaker("closed"), reason="ok")
    reported_at = await db.fetchval("SELECT reported_at FROM claimer.downstreams WHERE name = 'bank-api'")
    change = await db.fetchrow(
        "SELECT c.at, d.changed_at FROM claimer.downstream_changes c"
        " JOIN claimer.downstreams d USING (name) WHERE c.name = 'bank-api' ORDER BY c.id DESC LIMIT 1"
    )
    assert change is not None
    assert change["at"] > reported_at
    assert change["at"] == change["changed_at"]
    assert [s.envelope.occurred_at for s in staged if s.envelope.type == "downstream.changed"] == [
        change["at"]
    ]
