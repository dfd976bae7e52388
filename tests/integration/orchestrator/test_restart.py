"""A workflow survives a full restart of every service (orchestrator, claimer, ticker) during a
10-second durable sleep, and its activity after the sleep runs once."""

from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    StartWorkflow,
    TimerStarted,
    WorkflowCompleted,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import effects, send, wait_history
from tests.integration.ticker.support import start_ticker, stop_ticker


async def test_a_sleeping_workflow_survives_a_restart_of_every_service(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    ticker = await start_ticker(kafka, pg_dsn)
    orchestrator = await start_orchestrator_()
    claimer = await start_claimer()
    start = StartWorkflow(
        workflow_id="nap-1", workflow_type="tests.sleeper", input={"order_id": "nap-1", "seconds": 10}
    )
    await send(kafka, producer, start, "start-nap-1")
    await wait_history(db, "nap-1", "workflow.timer_started")

    # Everything goes away: the orchestrator as if killed, the others stopped.
    await orchestrator.kill()
    await claimer.stop(grace=0.5)
    await stop_ticker(ticker)

    ticker = await start_ticker(kafka, pg_dsn)
    try:
        await start_orchestrator_()
        await start_claimer()
        events = await wait_history(db, "nap-1", "workflow.completed", timeout=60)
    finally:
        await stop_ticker(ticker)
    assert [type(e) for e in events] == [
        WorkflowStarted,
        TimerStarted,
        WorkflowTimerFired,
        ActivityScheduled,
        ActivityCompleted,
        WorkflowCompleted,
    ]
    fired = events[2]
    started = events[1]
    assert isinstance(fired, WorkflowTimerFired)
    assert isinstance(started, TimerStarted)
    assert fired.fired_at >= started.fire_at
    assert [e["activity"] for e in await effects(db, "nap-1/")] == ["payments.authorize"]
