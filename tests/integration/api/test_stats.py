"""The stats processor (faust-streaming) on the real broker: exact counts after a known workload,
equal to the read model's for the same windows, and served by /v1/stats."""

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_base.stats import histogram
from tests.integration.acceptance.stats_records import AT_TEXT as STATS_AT
from tests.integration.acceptance.stats_records import RECORDS_FILE as STATS_RECORDS
from tests.integration.api.stats_support import HANDLERS, StatsProcess, past_minute, stored_counts, workload


def _exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 1))
    return ordered[int(rank) - 1]


def _close(measured_ms: float | None, exact_s: float) -> bool:
    assert measured_ms is not None
    return abs(measured_ms / 1000 - exact_s) <= exact_s * histogram.RELATIVE_ERROR + 1e-9


async def _read_model_counts(pool: Pool, base: datetime) -> Counter[tuple[str, str, datetime, str]]:
    """The same counters from the api's read model (api.run_attempts, api.runs, api.skipped_slots)."""
    out: Counter[tuple[str, str, datetime, str]] = Counter()
    rows = await pool.fetch(
        "SELECT r.job_id, a.outcome, a.started_at, a.finished_at FROM api.run_attempts a "
        "JOIN api.runs r USING (run_id) WHERE r.slot >= $1",
        base,
    )

    def minute(at: datetime) -> datetime:
        return at.replace(second=0, microsecond=0)

    for r in rows:
        out[("runs", r["job_id"], minute(r["started_at"]), "started")] += 1
        # An attempt that failed keeps its later outcome (retrying or dead_lettered) in the read model.
        if r["outcome"] == "completed":
            out[("runs", r["job_id"], minute(r["finished_at"]), "completed")] += 1
        if r["outcome"] in ("failed", "retrying", "dead_lettered"):
            out[("runs", r["job_id"], minute(r["finished_at"]), "failed")] += 1
    for r in await pool.fetch(
        "SELECT r.job_id, d.fire_at FROM api.run_dues d JOIN api.runs r USING (run_id)"
    ):
        out[("runs", r["job_id"], minute(r["fire_at"]), "due")] += 1
    for r in await pool.fetch("SELECT schedule_id, slot FROM api.skipped_slots"):
        out[("schedules", r["schedule_id"], minute(r["slot"]), "slots_skipped")] += 1
    return out


async def test_counts_are_exact_and_equal_the_read_model(
    app: FastAPI,
    client: httpx.AsyncClient,
    producer: Producer,
    kafka: KafkaSettings,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    base = past_minute(10)
    work = workload(base)
    await producer.send_many(work.topics(kafka))
    worker = StatsProcess(kafka, pg_dsn, tmp_path)
    try:

        async def all_counted() -> bool:
            assert worker.alive(), worker.log()
            found = Counter(await stored_counts(pg_dsn))
            if found != work.expected:
                wrong = {
                    k: (found[k], work.expected[k])
                    for k in found.keys() | work.expected.keys()
                    if found[k] != work.expected[k]
                }
                raise AssertionError(
                    f"(stored, expected) differ: {sorted(wrong.items())[:12]}\n{worker.log()[-3000:]}"
                )
            return True

        await assert_eventually(all_counted, timeout=90, interval=0.5, message="stats equal the workload")
        # Its health listener: alive, and ready since its copies to PostgreSQL succeed.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{worker.health_port}", timeout=5) as health:
            assert (await health.get("/livez")).status_code == 200
            ready = await health.get("/readyz")
            assert ready.status_code == 200, ready.text
    finally:
        worker.close()

    # The read model (projected by the app's embedded projector) holds the same counts.
    pool = app.state.services.pool
    keys = [k for k in work.expected if k[3] in ("started", "completed", "failed", "due", "slots_skipped")]

    async def read_model_caught_up() -> bool:
        found = await _read_model_counts(pool, base)
        return all(found[k] == work.expected[k] for k in keys)

    await assert_eventually(read_model_caught_up, timeout=60, message="read model equals stats")

    # Per schedule, over the api: counts per window, durations within the histogram's error.
    body = (
        await client.get(
            "/v1/stats/schedules",
            params={
                "size": "1m",
                "since": base.isoformat(),
                "until": (base + timedelta(minutes=5)).isoformat(),
            },
        )
    ).json()
    by_name = {s["name"]: s for s in body["series"]}
    assert set(by_name) == set(HANDLERS)
    for job, handler in HANDLERS.items():
        series = by_name[job]
        assert series["handler"] == handler
        for window in series["windows"]:
            start = datetime.fromisoformat(window["start"])
            for counter, n in window["counts"].items():
                family = "schedules" if counter == "slots_skipped" else "runs"
                assert n == work.expected[(family, job, start, counter)], (job, start, counter)
        durations = work.durations[job]
        total = series["total"]
        assert total["duration_ms"]["count"] == len(durations)
        for q in (0.5, 0.95, 0.99):
            assert _close(total["duration_ms"][f"p{int(q * 100)}"], _exact_quantile(durations, q)), (job, q)
        assert total["failure_rate"] == pytest.approx(
            sum(work.expected[("runs", job, s, "failed")] for s in {k[2] for k in work.expected})
            / (total["counts"]["completed"] + total["counts"]["failed"])
        )

    # Lateness against the read model's own (JobDue produce time minus fire time).
    lateness: dict[str, list[float]] = {
        r["job_id"]: []
        for r in await pool.fetch("SELECT DISTINCT job_id FROM api.runs WHERE slot >= $1", base)
    }
    for r in await pool.fetch(
        "SELECT r.job_id, d.produced_at, d.fire_at FROM api.run_dues d JOIN api.runs r USING (run_id)"
    ):
        lateness[r["job_id"]].append((r["produced_at"] - r["fire_at"]).total_seconds())
    for job in HANDLERS:
        total = by_name[job]["total"]["lateness_ms"]
        assert total["count"] == len(lateness[job])
        for q in (0.5, 0.99):
            assert _close(total[f"p{int(q * 100)}"], _exact_quantile(lateness[job], q)), (job, q)

    # Per handler: h.alpha merges stats-a and stats-b.
    handlers = (
        await client.get("/v1/stats/handlers", params={"size": "1h", "since": base.isoformat()})
    ).json()
    by_handler = {s["name"]: s["total"] for s in handlers["series"]}
    assert set(by_handler) == {"h.alpha", "h.beta"}
    alpha = by_handler["h.alpha"]
    assert alpha["counts"]["started"] == sum(
        n for (f, job, _, c), n in work.expected.items() if c == "started" and job in ("stats-a", "stats-b")
    )
    merged = work.durations["stats-a"] + work.durations["stats-b"]
    assert _close(alpha["duration_ms"]["p99"], _exact_quantile(merged, 0.99))
    assert by_handler["h.beta"]["counts"]["slots_skipped"] == 1

    # Per topic: poison parked.
    topics = (await client.get("/v1/stats/topics", params={"size": "1h", "since": base.isoformat()})).json()
    assert {s["name"]: s["total"]["counts"]["parked"] for s in topics["series"]} == {
        "t.orders": 3,
        "t.payments": 2,
    }


async def test_stats_requests_are_checked(client: httpx.AsyncClient) -> None:
    naive = await client.get("/v1/stats/schedules", params={"since": "2026-01-01T00:00:00"})
    assert naive.status_code in (400, 422), naive.text
    assert "offset" in naive.json()["detail"]
    too_wide = await client.get(
        "/v1/stats/schedules", params={"since": "2020-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}
    )
    assert too_wide.status_code in (400, 422)
    assert "windows" in too_wide.json()["detail"]
    bad_size = await client.get("/v1/stats/handlers", params={"size": "5m"})
    assert bad_size.status_code == 422
    # Before the processor ever ran against this database: empty, not an error.
    empty = await client.get("/v1/stats/topics")
    assert empty.status_code == 200
    assert empty.json()["series"] == []
    spec = (await client.get("/v1/openapi.json")).json()
    for path in ("/v1/stats/schedules", "/v1/stats/handlers", "/v1/stats/topics"):
        assert path in spec["paths"]


async def test_a_record_postgresql_cannot_store_does_not_stop_the_copy(
    producer: Producer, kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    # Issue 20's class of bug in the stats processor: a job id with a NUL (a record from a foreign
    # producer; the contracts refuse one) was counted like any other, and PostgreSQL refused every
    # copy of the windows after it, the good ones with it, on every flush for as long as it lived.
    at = past_minute(5) + timedelta(seconds=1)
    started = {"run_id": "r", "attempt": 1, "fence_token": 1, "owner": "c", "slot": at.isoformat()}
    data = {**started, "job_id": "nul\u0000job", "started_at": at.isoformat()}
    forged: dict[str, object] = {
        "type": "run.started",
        "version": 1,
        "id": "forged/1/started",
        "key": "nul",
        "source": "foreign",
        "occurred_at": at.isoformat(),
        "data": data,
    }
    topic = kafka.topic(RUN_EVENTS)
    await producer.send_raw(topic, key=b"nul", value=json.dumps(forged).encode())
    after = {
        **forged,
        "id": "after/1/started",
        "key": "after-nul",
        "data": {**data, "job_id": "after-nul"},
    }
    await producer.send_raw(topic, key=b"after-nul", value=json.dumps(after).encode())
    worker = StatsProcess(kafka, pg_dsn, tmp_path)
    try:
        window = at.replace(second=0, microsecond=0)

        async def counted() -> bool:
            assert worker.alive(), worker.log()
            return (await stored_counts(pg_dsn)).get(("runs", "after-nul", window, "started")) == 1

        await assert_eventually(
            counted, timeout=90, interval=0.5, message="the record after the NUL one counted"
        )
        assert "failed, will retry" not in worker.log(chars=200_000)
    finally:
        worker.close()


async def test_the_worker_counts_what_every_service_accepts_and_nothing_else(
    producer: Producer, kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    # The shared hostile records (tests/integration/acceptance/stats_records.json: the message
    # models' verdict on each) through the real worker, on the real broker and database: it
    # neither stops nor stores what the other services refuse, and counts what they accept.
    at = past_minute(5) + timedelta(seconds=1)
    moved = at.isoformat().replace("+00:00", "Z")
    records = json.loads(STATS_RECORDS.read_text())
    topics = {"runs": RUN_EVENTS, "schedules": SCHEDULE_EVENTS, "dlq": DLQ_EVENTS}
    for record in records:
        spec = JOBS_DUE if record["topic"] == JOBS_DUE.name else topics[record["family"]]
        value = str(record["value"]).replace(STATS_AT, moved).encode("utf-8", errors="surrogatepass")
        await producer.send_raw(kafka.topic(spec), key=b"hostile", value=value)
    sentinel = {
        "type": "run.started",
        "version": 1,
        "id": "sentinel@x/1/started",
        "key": "sentinel",
        "source": "foreign",
        "occurred_at": moved,
        "data": {"run_id": "sentinel@x", "job_id": "sentinel", "slot": moved, "attempt": 1, "fence_token": 1}
        | {"owner": "c", "started_at": moved},
    }
    await producer.send_raw(kafka.topic(RUN_EVENTS), key=b"hostile", value=json.dumps(sentinel).encode())
    worker = StatsProcess(kafka, pg_dsn, tmp_path)
    window = at.replace(second=0, microsecond=0)
    try:

        async def sentinel_counted() -> bool:
            assert worker.alive(), worker.log()
            return (await stored_counts(pg_dsn)).get(("runs", "sentinel", window, "started")) == 1

        await assert_eventually(sentinel_counted, timeout=90, interval=0.5, message="the record after them")
        assert "failed, will retry" not in worker.log(chars=200_000)
    finally:
        worker.close()
    stored = await stored_counts(pg_dsn)
    subjects = {(family, subject) for family, subject, _, _ in stored}
    for record in records:
        data = json.loads(str(record["value"]).replace(STATS_AT, moved))["data"]
        subject = (
            data.get("topic") if record["family"] == "dlq" else data.get("schedule_id", data.get("job_id"))
        )
        if record["refused"] is not None:
            assert (record["family"], subject) not in subjects, record["case"]
        elif '"0001-' not in record["value"]:
            # Counted in the recent minute; an instant of year 1 is taken too but falls outside
            # the windows the worker keeps.
            assert (record["family"], subject) in subjects, record["case"]
