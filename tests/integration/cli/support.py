"""A running api (uvicorn on a free loopback port) and a realistic scene to show in it.

Shared by the CLI tests and the dashboard's browser test. The scene's past (a schedule's runs over
the last hours, a checkout saga's typed history and its activity runs) goes through the api's own
projection function with the Kafka timestamps a live system would have given (so lateness is
realistic); everything else the tests need is produced to the real topics and projected by the running app.
"""

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from fastapi import FastAPI

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CompensationRegistered,
    CronSpec,
    DeadLetterStatusChanged,
    Envelope,
    HistoryEvent,
    IntervalSpec,
    JobDue,
    Message,
    MisfirePolicy,
    RetryPolicy,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunStarted,
    ScheduleCreated,
    ScheduleDefinition,
    SchedulePaused,
    SignalReceived,
    SlotSkipped,
    StartWorkflow,
    TimerStarted,
    WorkflowStarted,
    WorkflowTimerFired,
    history_event_id,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import (
    DLQ_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
    TopicSpec,
)
from slotflow.core.identity import activity_run_id, job_due_event_id, run_id
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_api.projection import Fact, project

PAYOUTS = "merchant-payouts"
STATEMENTS = "nightly-statements"
REPORTS = "reports.quarter-hourly"
WORKFLOW = "order-1042"
DEAD_LETTERS = ("slotflow.jobs.due.v1:3:118", "slotflow.runs.events.v1:1:2207")


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) on 127.0.0.1 at a free port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(600):
            if server.started or task.done():
                break
            await asyncio.sleep(0.05)
        if not server.started:
            if task.done():
                task.result()
            raise AssertionError("uvicorn did not start within 30 s")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=30)
        sock.close()


@dataclass
class Scene:
    """What the seeded read model holds, for assertions."""

    now: datetime
    hour: datetime
    facts: list[Fact] = field(default_factory=list)
    #: Slot (UTC) -> what the audit must call it.
    audit: dict[datetime, str] = field(default_factory=dict)
    _offsets: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        spec: TopicSpec,
        message: Message,
        *,
        id: str,
        key: str,
        occurred_at: datetime,
        produced_at: datetime | None = None,
    ) -> None:
        envelope = wrap(message, id=id, key=key, source="scene", occurred_at=occurred_at)
        offset = self._offsets.get(spec.name, 0)
        self._offsets[spec.name] = offset + 1
        record = Record(
            topic=spec.name,
            partition=0,
            offset=offset,
            key=key.encode(),
            value=encode(envelope),
            headers=(),
            timestamp_ms=int((produced_at or occurred_at).timestamp() * 1000),
        )
        self.facts.append(Fact(spec.name, record, envelope, message))


def payouts_definition() -> ScheduleDefinition:
    return ScheduleDefinition(
        spec=CronSpec(expression="0 * * * *"),
        handler="payouts.pay_merchants",
        payload={"currency": "EUR"},
        retry=RetryPolicy(max_attempts=3, non_retryable=("CardDeclined",)),
        # In an hour's first two minutes the scene ends an hour back (see build_scene), so the new
        # hour's slot has no fact: a grace longer than any test keeps it pending, never missed
        # (with the default 60 s, a run between minute 1 and 2 saw two missed slots, not one).
        misfire=MisfirePolicy(grace=timedelta(minutes=15)),
        tags=("money-moving",),
    )


def build_scene(now: datetime | None = None) -> Scene:
    """An hourly payouts schedule over the last eight hours, and and a checkout saga compensating after a failed step."""
    current = (now or datetime.now(UTC)).replace(microsecond=0)
    hour = current.replace(minute=0, second=0)
    if current - hour < timedelta(minutes=2):
        # The newest slot must be old enough for the audit to judge it.
        hour -= timedelta(hours=1)
    scene = Scene(now=current, hour=hour)
    created_at = hour - timedelta(hours=8, minutes=30)
    scene.add(
        SCHEDULE_EVENTS,
        ScheduleCreated(
            schedule_id=PAYOUTS,
            definition=payouts_definition(),
            paused=False,
            next_fire_at=hour + timedelta(hours=1),
        ),
        id="scene-create-payouts/created",
        key=PAYOUTS,
        occurred_at=created_at,
    )
    outcomes = {
        8: "completed",
        7: "late",
        6: "retried",
        5: "missed",
        4: "skipped",
        3: "dead_lettered",
        2: "duplicated",
        1: "completed",
        0: "running",
    }
    for hours_ago, outcome in outcomes.items():
        _payout_slot(scene, hour - timedelta(hours=hours_ago), outcome)
    _saga(scene, hour)
    return scene


def _payout_slot(scene: Scene, slot: datetime, outcome: str) -> None:
    rid = run_id(PAYOUTS, slot)
    definition = payouts_definition()
    expected = {
        "late": "late",
        "missed": "missed",
        "skipped": "skipped_by_policy",
        "duplicated": "duplicated_effect",
    }
    scene.audit[slot] = expected.get(outcome, "fired")
    if outcome == "missed":
        return
    if outcome == "skipped":
        scene.add(
            SCHEDULE_EVENTS,
            SlotSkipped(
                schedule_id=PAYOUTS,
                run_id=rid,
                slot=slot,
                reason="overlap",
                detail="previous run still running",
            ),
            id=f"{rid}/skipped",
            key=PAYOUTS,
            occurred_at=slot,
        )
        return
    produced = slot + (timedelta(seconds=95) if outcome == "late" else timedelta(milliseconds=180))
    due = JobDue(
        run_id=rid,
        job_id=PAYOUTS,
        slot=slot,
        handler=definition.handler,
        payload=definition.payload,
        retry=definition.retry,
        tags=definition.tags,
        fire_at=slot,
    )
    scene.add(JOBS_DUE, due, id=job_due_event_id(rid, 1), key=PAYOUTS, occurred_at=slot, produced_at=produced)
    start = produced + timedelta(milliseconds=40)
    claims: list[tuple[int, int, str]] = [(1, 1, "claimer-1")]
    if outcome == "retried":
        claims.append((2, 2, "claimer-2"))
    if outcome == "duplicated":
        claims.append((1, 2, "claimer-2"))
    for attempt, fence, owner in claims:
        common: dict[str, Any] = {
            "run_id": rid,
            "job_id": PAYOUTS,
            "slot": slot,
            "attempt": attempt,
            "fence_token": fence,
            "owner": owner,
        }
        at = start + timedelta(seconds=(attempt - 1) * 4 + (fence - 1))
        scene.add(
            RUN_EVENTS,
            RunStarted(**common, started_at=at),
            id=f"{rid}/{attempt}/started",
            key=PAYOUTS,
            occurred_at=at,
        )
        finished = at + timedelta(seconds=2)
        if outcome == "running":
            continue
        if (outcome == "retried" and attempt == 1) or outcome == "dead_lettered":
            retryable = outcome == "retried"
            error_type = "TimeoutError" if retryable else "CardDeclined"
            message = "bank API timed out" if retryable else "card declined by issuer"
            failed = RunFailed(
                **common,
                error_type=error_type,
                message=message,
                retryable=retryable,
                finished_at=finished,
                traceback=(
                    "Traceback (most recent call last):\n"
                    '  File "payouts.py", line 12, in pay\n'
                    "    bank.charge(merchant)\n"
                    f"{error_type}: {message}\n"
                ),
                logs=(
                    f"{at:%Y-%m-%d %H:%M:%S},120 INFO payouts: attempt {attempt}: paying merchant m-1042",
                    f"{finished:%Y-%m-%d %H:%M:%S},480 WARNING payouts: bank answered {message}",
                ),
            )
            scene.add(RUN_EVENTS, failed, id=f"{rid}/{attempt}/failed", key=PAYOUTS, occurred_at=finished)
            if retryable:
                retrying = RunRetrying(
                    **common,
                    next_attempt=2,
                    retry_at=finished + timedelta(seconds=2),
                    delay=timedelta(seconds=2),
                )
                scene.add(
                    RUN_EVENTS, retrying, id=f"{rid}/{attempt}/retrying", key=PAYOUTS, occurred_at=finished
                )
                due2 = due.model_copy(update={"attempt": 2, "kind": "retry"})
                retry_at = finished + timedelta(seconds=2)
                scene.add(JOBS_DUE, due2, id=job_due_event_id(rid, 2), key=PAYOUTS, occurred_at=retry_at)
            else:
                dead = RunDeadLettered(**common, reason="permanent_error")
                scene.add(RUN_EVENTS, dead, id=f"{rid}/dead-lettered", key=PAYOUTS, occurred_at=finished)
            continue
        done = RunCompleted(**common, result={"paid": 42}, started_at=at, finished_at=finished)
        # Two claims completing one run is what the audit calls a duplicated effect; ids differ per claim.
        scene.add(
            RUN_EVENTS, done, id=f"{rid}/{attempt}/{fence}/completed", key=PAYOUTS, occurred_at=finished
        )


def _saga(scene: Scene, hour: datetime) -> None:
    """A checkout saga: two steps succeed, booking the shipment fails, compensations run newest first.

    The refund is done; the inventory release is being run by a claimer (so the saga is compensating).
    """
    begin = hour - timedelta(minutes=40)
    start = StartWorkflow(
        workflow_id=WORKFLOW, workflow_type="orders.checkout", input={"order": 1042, "total": "99.90"}
    )
    scene.add(WORKFLOW_COMMANDS, start, id="scene-start-order", key=WORKFLOW, occurred_at=begin)

    def at(sequence: int) -> datetime:
        return begin + timedelta(seconds=sequence * 20)

    def history(event: HistoryEvent) -> None:
        scene.add(
            WORKFLOW_HISTORY,
            event,
            id=history_event_id(WORKFLOW, event.sequence),
            key=WORKFLOW,
            occurred_at=at(event.sequence),
        )

    def step(sequence: int, activity: str, outcome: str, compensates: int | None = None) -> None:
        history(
            ActivityScheduled(
                workflow_id=WORKFLOW,
                sequence=sequence,
                activity=activity,
                run_id=activity_run_id(WORKFLOW, sequence),
                payload={"order": 1042},
                compensation=compensates is not None,
                compensates=compensates,
            )
        )
        _activity_run(scene, sequence, activity, at(sequence), outcome)

    history(
        WorkflowStarted(
            workflow_id=WORKFLOW,
            sequence=1,
            workflow_type=start.workflow_type,
            input=start.input,
            command_id="scene-start-order",
        )
    )
    step(2, "inventory.reserve", "completed")
    history(
        ActivityCompleted(workflow_id=WORKFLOW, sequence=3, scheduled_sequence=2, result={"hold": "H-77"})
    )
    history(
        CompensationRegistered(
            workflow_id=WORKFLOW,
            sequence=4,
            for_step=2,
            activity="inventory.release",
            payload={"hold": "H-77"},
        )
    )
    step(5, "payments.charge", "completed")
    history(
        ActivityCompleted(workflow_id=WORKFLOW, sequence=6, scheduled_sequence=5, result={"charge": "ch_9"})
    )
    history(
        CompensationRegistered(
            workflow_id=WORKFLOW,
            sequence=7,
            for_step=5,
            activity="payments.refund",
            payload={"charge": "ch_9"},
        )
    )
    timer_id = f"{WORKFLOW}/timer/8"
    history(TimerStarted(workflow_id=WORKFLOW, sequence=8, timer_id=timer_id, fire_at=at(9)))
    history(
        WorkflowTimerFired(
            workflow_id=WORKFLOW, sequence=9, started_sequence=8, timer_id=timer_id, fired_at=at(9)
        )
    )
    history(
        SignalReceived(
            workflow_id=WORKFLOW, sequence=10, signal="address_confirmed", payload={"zip": "10115"}
        )
    )
    step(11, "shipping.book", "failed")
    history(
        ActivityFailed(
            workflow_id=WORKFLOW,
            sequence=12,
            scheduled_sequence=11,
            error_type="NoCarrier",
            message="no carrier serves 10115",
            permanent=True,
        )
    )
    step(13, "payments.refund", "completed", compensates=5)
    history(
        ActivityCompleted(workflow_id=WORKFLOW, sequence=14, scheduled_sequence=13, result={"refund": "re_3"})
    )
    step(15, "inventory.release", "running", compensates=2)


def _activity_run(scene: Scene, sequence: int, handler: str, at: datetime, outcome: str) -> None:
    """The claimer's side of an activity: its JobDue and run events under `{workflow_id}/{sequence}`."""
    rid = activity_run_id(WORKFLOW, sequence)
    due = JobDue(
        run_id=rid,
        job_id=WORKFLOW,
        slot=at,
        kind="activity",
        handler=handler,
        workflow_id=WORKFLOW,
        sequence=sequence,
    )
    scene.add(JOBS_DUE, due, id=job_due_event_id(rid, 1), key=WORKFLOW, occurred_at=at)
    common: dict[str, Any] = {
        "run_id": rid,
        "job_id": WORKFLOW,
        "slot": at,
        "attempt": 1,
        "fence_token": 1,
        "owner": "claimer-1",
        "workflow_id": WORKFLOW,
        "sequence": sequence,
    }
    started = at + timedelta(milliseconds=300)
    scene.add(
        RUN_EVENTS,
        RunStarted(**common, started_at=started),
        id=f"{rid}/1/started",
        key=WORKFLOW,
        occurred_at=started,
    )
    finished = started + timedelta(seconds=1)
    if outcome == "completed":
        done = RunCompleted(**common, result={"ok": True}, started_at=started, finished_at=finished)
        scene.add(RUN_EVENTS, done, id=f"{rid}/1/completed", key=WORKFLOW, occurred_at=finished)
    elif outcome == "failed":
        failed = RunFailed(
            **common,
            error_type="NoCarrier",
            message="no carrier serves 10115",
            retryable=False,
            finished_at=finished,
        )
        scene.add(RUN_EVENTS, failed, id=f"{rid}/1/failed", key=WORKFLOW, occurred_at=finished)
        dead = RunDeadLettered(**common, reason="permanent_error")
        scene.add(RUN_EVENTS, dead, id=f"{rid}/dead-lettered", key=WORKFLOW, occurred_at=finished)


async def project_scene(pool: Pool, schema: str, facts: Sequence[Fact]) -> int:
    """Write ``facts`` through the api's projection, as its projector would."""
    async with pool.acquire() as conn, conn.transaction():
        return await project(conn, schema=schema, facts=facts)


async def produce_live(kafka: KafkaSettings, now: datetime, hour: datetime) -> None:
    """Two more schedules and two dead letters, produced to the real topics for the app to project."""
    statements = ScheduleDefinition(
        spec=CronSpec(expression="0 2 * * *", timezone="Europe/Berlin"),
        handler="statements.render",
        tags=("customer-facing",),
    )
    reports = ScheduleDefinition(
        spec=IntervalSpec(every=timedelta(minutes=15), anchor=datetime(2026, 1, 1, tzinfo=UTC)),
        handler="reports.build",
    )
    records: list[tuple[TopicSpec, Envelope]] = [
        (
            SCHEDULE_EVENTS,
            wrap(
                ScheduleCreated(
                    schedule_id=STATEMENTS, definition=statements, paused=False, next_fire_at=None
                ),
                id="live-statements/created",
                key=STATEMENTS,
                source="ticker",
                occurred_at=now - timedelta(days=2),
            ),
        ),
        (
            SCHEDULE_EVENTS,
            wrap(
                SchedulePaused(
                    schedule_id=STATEMENTS, reason="bank maintenance", resume_at=now + timedelta(days=2)
                ),
                id="live-statements/paused",
                key=STATEMENTS,
                source="ticker",
                occurred_at=now - timedelta(hours=1),
            ),
        ),
        (
            SCHEDULE_EVENTS,
            wrap(
                ScheduleCreated(schedule_id=REPORTS, definition=reports, paused=False, next_fire_at=None),
                id="live-reports/created",
                key=REPORTS,
                source="ticker",
                occurred_at=now - timedelta(days=1),
            ),
        ),
    ]
    dead_run = run_id(PAYOUTS, hour - timedelta(hours=3))
    invalid = "invalid job.due v1: handler: String should match pattern"
    letters = [
        (DEAD_LETTERS[0], "invalid_payload", "InvalidPayload", invalid, None, None),
        (DEAD_LETTERS[1], "permanent_error", "CardDeclined", "card declined by issuer", PAYOUTS, dead_run),
    ]
    for index, (letter_id, reason, error_type, error, job, run) in enumerate(letters):
        topic = letter_id.rsplit(":", 2)[0]
        parked = DeadLetterStatusChanged(
            dead_letter_id=letter_id,
            status="parked",
            reason=reason,
            topic=topic,
            source_service="claimer",
            job_id=job,
            run_id=run,
            at=now - timedelta(minutes=30 - index),
            error_type=error_type,
            error=error,
        )
        records.append(
            (
                DLQ_EVENTS,
                wrap(parked, id=f"{letter_id}/parked", key=letter_id, source="dlq", occurred_at=parked.at),
            )
        )
    async with Producer(kafka, client_id="scene") as producer:
        await producer.send_many((kafka.topic(spec), envelope) for spec, envelope in records)
