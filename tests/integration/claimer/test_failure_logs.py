"""A claimer process logs each failed attempt as one line (retried or dead-lettered, with run id,
attempt and error), as JSON objects with SLOTFLOW_LOG_FORMAT=json, and keeps aiokafka quiet.

The claimer is a real process (`python -m slotflow_claimer`) beside a real ticker, which stores and
fires the retry timer, on the real broker and database.
"""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from slotflow.contracts import CreateSchedule, OnceSpec, RetryPolicy, ScheduleDefinition
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.claimer.support import REPO
from tests.integration.ticker.support import db_now, send, tickers


def _entries(log: Path) -> list[dict[str, Any]]:
    """Every line of the log as the JSON object it must be (a text line fails the test)."""
    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


async def test_each_failure_is_one_structured_line_and_aiokafka_is_quiet(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, db: Pool, tmp_path: Path
) -> None:
    port = free_port()
    env = stack_env(
        kafka,
        pg_dsn,
        "SLOTFLOW_CLAIMER_",
        claimer_id="claimer-logs",
        handler_modules="tests.integration.claimer.log_handlers",
        metrics_port=port,
    )
    env.update(PYTHONPATH=str(REPO), SLOTFLOW_LOG_FORMAT="json")
    claimer = ServiceProcess(
        "slotflow_claimer", "claimer-logs", env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port
    )
    try:
        await assert_eventually(claimer.ready, timeout=60, message="the claimer serves metrics")
        async with tickers(kafka, pg_dsn):
            at = (await db_now(db) + timedelta(seconds=1)).replace(microsecond=0)
            retry = RetryPolicy(
                base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), max_attempts=2
            )
            definition = ScheduleDefinition(
                spec=OnceSpec(at=at), handler="logs.always_times_out", retry=retry
            )
            await send(producer, kafka, CreateSchedule(schedule_id="payout", definition=definition))

            async def dead_lettered() -> list[dict[str, Any]] | None:
                entries = _entries(claimer.log_path)
                done = any(e.get("outcome") == "dead_lettered" for e in entries)
                return entries if done else None

            entries = await assert_eventually(dead_lettered, timeout=60, message="the run dead-lettered")
    finally:
        claimer.stop()

    run_id = f"payout@{at.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    failures = [e for e in entries if e.get("run_id") == run_id]
    assert [(e["attempt"], e["outcome"]) for e in failures] == [(1, "retrying"), (2, "dead_lettered")], (
        failures
    )
    first, last = failures
    assert first["level"] == "WARNING"
    assert first["error_type"] == "TransientError"
    assert first["error"] == "bank API timed out on attempt 1"
    assert first["retry_in_seconds"] <= 0.2
    assert (
        f"run {run_id} attempt 1 failed (TransientError: bank API timed out on attempt 1)" in first["message"]
    )
    assert last["level"] == "ERROR"
    assert last["dlq_reason"] == "attempts_exhausted"
    assert last["handler"] == "logs.always_times_out"
    # The start-up line names the handlers it serves; aiokafka says nothing below WARNING.
    assert any(
        "logs.always_times_out" in e["message"] for e in entries if e["logger"].startswith("slotflow_claimer")
    )
    chatter = [e for e in entries if e["logger"].startswith("aiokafka") and e["level"] in ("DEBUG", "INFO")]
    assert chatter == []
