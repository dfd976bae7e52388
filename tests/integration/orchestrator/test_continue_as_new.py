"""Continue-as-new end to end on the real broker and database: a workflow that continues as new
twice runs three runs in one history, each run's activity once under its own run id, a signal
sent while a later run waits reaches that run, the orchestrator restarted between runs picks the
newest run up from the table, the execution timeout spans every run and is cancelled at the end,
and the history topic and the api's fold agree with the table."""

from datetime import timedelta

from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    HistoryEvent,
    SignalWorkflow,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowStarted,
)
from slotflow.contracts.topics import TIMER_COMMANDS, WORKFLOW_HISTORY
from slotflow.history import Recorded, fold
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.stepping import execution_timer_id
from tests.integration.claimer.support import TopicReader
from tests.integration.cli.test_replay_topic import slotflow
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import Workflows, wait_published

WF = "batches-1"


async def _runs_done(workflows: Workflows, count: int) -> list[HistoryEvent]:
    """The history once ``count`` runs have their activity completed."""

    async def probe() -> list[HistoryEvent] | None:
        events = await workflows.history(WF)
        done = [e for e in events if isinstance(e, ActivityCompleted)]
        return events if len(done) >= count and isinstance(events[-1], ActivityCompleted) else None

    return await assert_eventually(probe, timeout=60, message=f"{count} runs with their activity done")


async def test_a_workflow_continued_as_new_twice_runs_three_runs_to_completion(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    first = await start_orchestrator_()
    await start_claimer()
    workflows = Workflows(kafka, producer, db)
    start = StartWorkflow(
        workflow_id=WF, workflow_type="tests.batches", input={"last": 2}, execution_timeout=timedelta(hours=1)
    )
    await workflows.send(start, "start-batches-1")
    await _runs_done(workflows, 1)
    await workflows.send(SignalWorkflow(workflow_id=WF, signal="next"), "next-1")
    second = await _runs_done(workflows, 2)
    assert isinstance(second[-3], WorkflowStarted)
    assert second[-3].continued_from == second[-4].sequence

    # A fresh orchestrator (nothing kept in memory) decides the second run's signal from the table.
    await first.stop()
    await start_orchestrator_()
    await workflows.send(SignalWorkflow(workflow_id=WF, signal="next"), "next-2")
    events = await workflows.wait(WF, "workflow.completed")

    starts = [e for e in events if isinstance(e, WorkflowStarted)]
    continued = [e for e in events if isinstance(e, WorkflowContinuedAsNew)]
    assert [s.continued_from for s in starts] == [None, *[c.sequence for c in continued]]
    assert [s.input.get("cursor", 0) for s in starts] == [0, 1, 2]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    activities = [e for e in events if isinstance(e, ActivityScheduled)]
    assert [a.run_id for a in activities] == [f"{WF}/{s.sequence + 1}" for s in starts]
    assert await workflows.effects(f"{WF}/") == ["payments.authorize"] * 3
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result["cursor"] == 2
    assert done.result["runs"] == [
        {"run_id": f"{WF}#{s.sequence}", "continued_from": s.continued_from} for s in starts
    ]

    row = await workflows.db.fetchrow(
        "SELECT status, last_sequence, start_command_id FROM orchestrator.workflows WHERE workflow_id = $1",
        WF,
    )
    assert row is not None
    assert dict(row) == {
        "status": "completed",
        "last_sequence": len(events),
        "start_command_id": "start-batches-1",
    }
    # One execution timeout for the whole chain: started once, cancelled when the last run ended.
    async with TopicReader(kafka, TIMER_COMMANDS) as timers:
        await timers.wait_for("timer.cancel")
        deadline = execution_timer_id(WF)
        assert [e.id for e in timers.seen if e.data.get("timer_id") == deadline] == [
            f"{deadline}/start",
            f"{deadline}/cancel",
        ]
    async with TopicReader(kafka, WORKFLOW_HISTORY) as published:
        await published.wait_for("workflow.completed")
        assert [e.id for e in published.seen] == [f"{WF}#{e.sequence}" for e in events]
        recorded = [
            Recorded(e, envelope.occurred_at) for e, envelope in zip(events, published.seen, strict=True)
        ]
    state = fold(recorded)
    assert state is not None
    assert (state.status, state.last_sequence, state.result) == ("completed", len(events), done.result)
    assert [s["run_id"] for s in state.steps] == [a.run_id for a in activities]
    # `slotflow replay` reads the published history and replays every run of it against the code.
    await wait_published(kafka, WF, len(events))
    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--workflow-id", WF, "--module", "tests.integration.orchestrator.flows"
    )
    assert code == 0, (out, err)
    assert out.startswith(f"ok  {WF}  tests.")
    assert f"{len(events)} events, 3 runs, completed" in out, out
