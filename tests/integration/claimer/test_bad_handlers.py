"""Handler code never escapes its run: whatever it raises is recorded as the run's failure, and a
run whose task ended without an outcome is released instead of being renewed forever."""

import asyncio
import json
import os
import threading
import time
from datetime import timedelta

import pytest

from slotflow.contracts import DeadLettered, RetryPolicy
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing.badinput import bad_handlers
from slotflow_claimer.executor import Executor
from tests.integration.claimer import cpu_handlers
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import REPO, TopicReader, job_due, publish, wait_state


class Meltdown(BaseException):
    """Not an Exception: `except Exception` in the claimer let it end the run's task silently."""


async def test_a_base_exception_from_a_handler_is_recorded_and_the_run_released(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    async def melts(ctx: RunContext) -> None:
        raise Meltdown("core temperature exceeded")

    async def fine(ctx: RunContext) -> str:
        return "ok"

    registry.register("test.melts", melts)
    registry.register("test.fine", fine)
    # A long lease: before the fix the run stayed `running`, its lease renewed by the heartbeat.
    claimer = await start_claimer(lease_ttl_seconds=30)
    job = job_due("melts", handler="test.melts", retry=RetryPolicy(max_attempts=1))
    after = job_due("fine-after", handler="test.fine")
    await publish(producer, kafka, [job, after])
    row = await wait_state(db, job.run_id, "dead_lettered", timeout=20)
    assert row["lease_expires_at"] is None
    assert json.loads(row["error"])["error_type"] == "Meltdown"
    assert json.loads(row["error"])["reason"] == "attempts_exhausted"
    await wait_state(db, after.run_id, "completed")
    assert claimer.executor.in_flight == 0
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    assert [(entry.data["run_id"], entry.data["error_type"]) for entry in letters] == [
        (job.run_id, "Meltdown")
    ]
    assert "core temperature exceeded" in letters[0].data["error"]


async def test_a_handler_raising_cancelled_error_itself_is_a_failure_not_a_shutdown(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    async def cancels(ctx: RunContext) -> None:
        raise asyncio.CancelledError("a library cancelled something of its own")

    registry.register("test.cancels", cancels)
    claimer = await start_claimer(lease_ttl_seconds=30)
    job = job_due("cancels", handler="test.cancels", retry=RetryPolicy(max_attempts=1))
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "dead_lettered", timeout=20)
    assert json.loads(row["error"])["error_type"] == "CancelledError"
    assert claimer.executor.in_flight == 0


async def test_a_task_that_ends_without_an_outcome_releases_its_run(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    async def counted(ctx: RunContext) -> str:
        calls.append(ctx.fence_token)
        return "done"

    registry.register("test.counted", counted)
    # A fault in the claimer's own code after the handler returned (here: recording the duration
    # metric), once: the task ends with no outcome submitted. Without the safety net the run stayed
    # `running` with a renewed lease forever.
    original = Executor._observe
    faults = [Meltdown("metrics exploded")]

    def faulty(self: Executor, handler: str, outcome: str, started: float) -> None:
        if faults:
            raise faults.pop()
        original(self, handler, outcome, started)

    monkeypatch.setattr(Executor, "_observe", faulty)
    await start_claimer(lease_ttl_seconds=30, reaper_interval_seconds=0.2)
    job = job_due("orphaned", handler="test.counted", retry=RetryPolicy(base=timedelta(milliseconds=100)))
    await publish(producer, kafka, [job])
    # Released (lease expired at once), so the reaper took it over well inside the 30 s lease.
    row = await wait_state(db, job.run_id, "completed", timeout=15)
    assert calls == [1, 2]
    assert row["fence_token"] == 2
    assert [h["error_type"] for h in json.loads(row["history"])] == ["LeaseExpired"]


async def test_plain_def_handlers_run_off_the_loop_in_a_thread_or_a_process(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A spawned worker imports the handler's module by name (with this process's sys.path), as a
    # deployed claimer's would; pytest's importlib mode leaves the repository off sys.path.
    monkeypatch.syspath_prepend(str(REPO))
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def blocking(ctx: RunContext) -> str:
        seen.append(threading.get_ident())
        time.sleep(0.5)  # would stall the loop (and every heartbeat) if it ran there
        return ctx.call(fetch_one(ctx))

    async def fetch_one(ctx: RunContext) -> str:
        assert ctx.pool is not None
        return str(await ctx.pool.fetchval("SELECT 'from the loop'"))

    registry.register("test.blocking", blocking)
    registry.register("test.digest", cpu_handlers.digest, runs_in="process")
    claimer = await start_claimer(handler_processes=1)
    sync_job = job_due("blocking", handler="test.blocking")
    cpu_job = job_due("digest", handler="test.digest", payload={"n": 10_000})
    await publish(producer, kafka, [sync_job, cpu_job])
    row = await wait_state(db, sync_job.run_id, "completed")
    assert json.loads(row["result"]) == "from the loop"
    assert len(seen) == 1
    assert seen[0] != loop_thread
    row = await wait_state(db, cpu_job.run_id, "completed", timeout=60)
    result = json.loads(row["result"])
    assert result["total"] == sum(i * i for i in range(10_000))
    assert result["pid"] != os.getpid()
    assert result["token"] == 1
    assert result["pool"] is True  # a detached context: no pools in another process
    assert claimer.metrics.value("slotflow_claimer_loop_blocked_total", {"handler": "test.blocking"}) == 0


async def test_the_bad_handler_catalogue_ends_as_recorded_runs(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    cases = bad_handlers()
    for case in cases:
        registry.register(case.name, case.fn)
    claimer = await start_claimer(lease_ttl_seconds=30)
    jobs = {
        case.name: job_due(case.name, handler=case.name, retry=RetryPolicy(max_attempts=1)) for case in cases
    }
    await publish(producer, kafka, list(jobs.values()))
    for case in cases:
        row = await wait_state(db, jobs[case.name].run_id, case.state)
        error = json.loads(row["error"]) if row["error"] is not None else None
        assert (error or {}).get("error_type") == case.error_type, case.name
    assert not claimer.fatal.is_set()
    assert claimer.executor.in_flight == 0
