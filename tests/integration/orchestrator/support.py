"""Orchestrators and claimers in-process on the real broker and a fresh database, and probes."""

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slotflow.commands import publish_command
from slotflow.contracts import HistoryEvent, Message, StartWorkflow
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import migrate as claimer_migrate
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.config import OrchestratorSettings, Settings
from slotflow_orchestrator.deciding import history_of
from slotflow_orchestrator.stepping import WorkflowCode
from tests.integration.claimer.support import TopicReader


def orchestrator_settings(kafka: KafkaSettings, pg_dsn: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"idle_poll_seconds": 0.02, "lease_check_seconds": 0.2, "poll_timeout_ms": 100}
    values.update(overrides)
    return Settings(
        orchestrator=OrchestratorSettings(**values),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=10),
    )


@dataclass
class Running:
    """An orchestrator running as a task until `stop()`."""

    orchestrator: OrchestratorService
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None

    async def start(self) -> "Running":
        self.task = asyncio.create_task(self.orchestrator.run(self.stop_event))
        ready = asyncio.create_task(self.orchestrator.ready.wait())
        await asyncio.wait([self.task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if self.task.done():
            self.task.result()  # raises what stopped it
        if not ready.done():
            ready.cancel()
            raise AssertionError("the orchestrator did not start within 30 s")
        return self

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None and not self.task.done():
            await asyncio.wait_for(self.task, timeout=60)

    async def kill(self) -> None:
        """Cancel every loop without a drain (a crash in-process: nothing orderly happens)."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def start_orchestrator(settings: Settings, workflow_code: WorkflowCode) -> Running:
    return await Running(OrchestratorService(settings, workflow_code=workflow_code)).start()


async def send(kafka: KafkaSettings, producer: Any, message: Message, command_id: str) -> str:
    return await publish_command(producer, kafka, message, command_id=command_id, source="test")


async def history(pool: Pool, workflow_id: str, schema: str = "orchestrator") -> list[HistoryEvent]:
    rows = await pool.fetch(
        sql("SELECT type, data FROM {schema}.history WHERE workflow_id = $1 ORDER BY sequence", schema),
        workflow_id,
    )
    return history_of([(r["type"], r["data"]) for r in rows])


async def wait_history(
    pool: Pool, workflow_id: str, last_type: str, *, timeout: float = 60.0
) -> list[HistoryEvent]:
    """The history once its newest event is of ``last_type``."""
    seen: list[Sequence[HistoryEvent]] = [[]]

    async def probe() -> list[HistoryEvent] | None:
        events = await history(pool, workflow_id)
        seen[0] = events
        return events if events and events[-1].message_type == last_type else None

    try:
        return await assert_eventually(probe, timeout=timeout, message=f"{workflow_id} ends with {last_type}")
    except AssertionError as err:
        shown = [f"{e.sequence}:{e.message_type}" for e in seen[0]]
        raise AssertionError(f"{workflow_id} never reached {last_type}; history {shown}") from err


async def effects(pool: Pool, run_id_prefix: str = "") -> list[dict[str, Any]]:
    """Every effect attempt the test activities recorded (activities.py: append-only, no key)."""
    rows = await pool.fetch(
        "SELECT run_id, activity, attempt, order_id FROM order_effects WHERE run_id LIKE $1 ORDER BY at",
        f"{run_id_prefix}%",
    )
    return [dict(r) for r in rows]


@dataclass
class Workflows:
    """A test's view of a running orchestrator and claimer: send commands, read what happened."""

    kafka: KafkaSettings
    producer: Any
    db: Pool

    async def send(self, message: Message, command_id: str) -> str:
        return await send(self.kafka, self.producer, message, command_id)

    async def start(
        self, workflow_id: str, workflow_type: str, input: dict[str, Any], command_id: str, **options: Any
    ) -> str:
        """StartWorkflow (``options``: its other fields, such as ``execution_timeout``)."""
        start = StartWorkflow(workflow_id=workflow_id, workflow_type=workflow_type, input=input, **options)
        return await self.send(start, command_id)

    async def wait(self, workflow_id: str, last_type: str, *, timeout: float = 60.0) -> list[HistoryEvent]:
        """The history once its newest event is of ``last_type`` (`wait_history`)."""
        return await wait_history(self.db, workflow_id, last_type, timeout=timeout)

    async def history(self, workflow_id: str) -> list[HistoryEvent]:
        return await history(self.db, workflow_id)

    async def effects(self, run_id_prefix: str = "") -> list[str]:
        """The activities whose effects the test activities recorded, in order."""
        return [e["activity"] for e in await effects(self.db, run_id_prefix)]


# What the claimer's intake and outcome write leave for a run, for tests that decide an outcome
# without running its activity: the orchestrator believes an outcome only as far as this row backs
# it (slotflow.issuers). The JobDue columns hold a placeholder record.
_CLAIMER_RECORD = """
INSERT INTO {schema}.runs (run_id, job_id, slot, kind, handler, retry, overlap, workflow_id, sequence,
    attempt, round_start, state, fence_token, owner, result, due_topic, due_partition, due_offset,
    due_value, finished_at)
VALUES ($1, $2, now(), 'activity', $3, '{}'::jsonb, 'allow', $2, $4, $5, 1, $6, $7, 'claimer',
    $8::jsonb, 'test', 0, 0, ''::bytea, now())
ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, fence_token = EXCLUDED.fence_token,
    attempt = EXCLUDED.attempt, result = EXCLUDED.result
"""


async def claimer_record(
    pool: Pool,
    workflow_id: str,
    sequence: int,
    *,
    handler: str,
    state: str = "completed",
    fence_token: int = 1,
    attempt: int = 1,
    result: Any = None,
) -> None:
    """The claimer's record of the activity run `{workflow_id}/{sequence}` (its schema migrated)."""
    await claimer_migrate(pool)
    await pool.execute(
        sql(_CLAIMER_RECORD, "claimer"),
        f"{workflow_id}/{sequence}",
        workflow_id,
        handler,
        sequence,
        attempt,
        state,
        fence_token,
        json.dumps(result),
    )


async def wait_published(kafka: KafkaSettings, workflow_id: str, count: int) -> None:
    """Until the history topic holds ``count`` events of ``workflow_id`` (the relay's lag)."""
    async with TopicReader(kafka, WORKFLOW_HISTORY) as published:

        async def probe() -> bool:
            await published.drain()
            return len({e.id for e in published.seen if e.key == workflow_id}) >= count

        await assert_eventually(probe, timeout=30, message=f"{count} events of {workflow_id} published")
