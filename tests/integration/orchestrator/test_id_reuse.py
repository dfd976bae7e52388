"""StartWorkflow for a taken workflow id, under each id-reuse policy, on the real broker and
database: reject_duplicate refuses it open or closed, allow_after_close starts a new run once the
last one closed (and refuses it while one is open), terminate_running ends the open run and starts
the next. Each start is answered accepted or rejected with the reason; every run leaves its own
activities, and the history keeps all runs gap-free."""

from datetime import timedelta

from slotflow.contracts import (
    ActivityScheduled,
    Envelope,
    HistoryEvent,
    SignalWorkflow,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from slotflow.contracts.topics import WORKFLOW_EVENTS
from slotflow.contracts.workflows import IdReusePolicy
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.stepping import TERMINATED
from tests.integration.claimer.support import TopicReader
from tests.integration.cli.test_replay_topic import slotflow
from tests.integration.orchestrator.support import Workflows, wait_published

WF = "reuse-1"


async def _answer(answers: TopicReader, command_id: str) -> tuple[str, str | None]:
    """The command's answer: ("command.accepted", None) or ("command.rejected", reason)."""

    async def probe() -> Envelope | None:
        await answers.drain()
        return next((e for e in answers.seen if e.data.get("command_id") == command_id), None)

    found = await assert_eventually(probe, timeout=30, message=f"an answer to {command_id}")
    return found.type, found.data.get("reason")


async def test_each_id_reuse_policy_is_answered_and_starts_a_new_run_only_where_it_allows(
    kafka: KafkaSettings, workflows: Workflows
) -> None:
    async def start(command_id: str, policy: IdReusePolicy, run: int) -> tuple[str, str | None]:
        message = StartWorkflow(
            workflow_id=WF,
            workflow_type="tests.approval",
            input={"order_id": WF, "run": run},
            id_reuse_policy=policy,
            execution_timeout=timedelta(hours=1),
        )
        await workflows.send(message, command_id)
        return await _answer(answers, command_id)

    async def approve(command_id: str) -> list[HistoryEvent]:
        await workflows.send(
            SignalWorkflow(workflow_id=WF, signal="approve", payload={"by": command_id}), command_id
        )
        return list(await workflows.wait(WF, "workflow.completed"))

    async with TopicReader(kafka, WORKFLOW_EVENTS) as answers:
        assert await start("first", "reject_duplicate", 1) == ("command.accepted", None)
        await workflows.wait(WF, "workflow.started")

        # While the first run is open: a duplicate start and an allow_after_close start are refused.
        kind, reason = await start("dup-open", "reject_duplicate", 9)
        assert (kind, reason) == (
            "command.rejected",
            f"workflow {WF} already exists (running); id_reuse_policy is reject_duplicate",
        )
        kind, reason = await start("after-close-open", "allow_after_close", 9)
        assert kind == "command.rejected"
        assert reason is not None
        assert reason.startswith(f"workflow {WF} is still open (running)")
        first = await approve("approve-1")
        assert len(first) == 5  # started, signal, scheduled, completed, workflow completed

        # Closed: reject_duplicate still refuses; allow_after_close starts run 2 after the end.
        kind, reason = await start("dup-closed", "reject_duplicate", 9)
        assert (kind, reason) == (
            "command.rejected",
            f"workflow {WF} already exists (closed); id_reuse_policy is reject_duplicate",
        )
        assert await start("second", "allow_after_close", 2) == ("command.accepted", None)
        second = await approve("approve-2")

        # Open again: terminate_running ends run 2's successor and starts run 4 at once.
        assert await start("third", "allow_after_close", 3) == ("command.accepted", None)
        await workflows.wait(WF, "workflow.started")
        assert await start("fourth", "terminate_running", 4) == ("command.accepted", None)
        events = await approve("approve-4")

    starts = [e for e in events if isinstance(e, WorkflowStarted)]
    assert [(s.command_id, s.input["run"]) for s in starts] == [
        ("first", 1),
        ("second", 2),
        ("third", 3),
        ("fourth", 4),
    ]
    assert [s.reused_after for s in starts] == [None, 5, 10, 12]
    assert second[5:] == events[5:10]
    terminated = events[11]
    assert isinstance(terminated, WorkflowFailed)
    assert (terminated.error_type, terminated.compensated) == (TERMINATED, False)
    assert "fourth" in terminated.message
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result["approved_by"] == "approve-4"
    # Every run's activity has its own run id, and each ran once (run 3 never got its signal).
    runs = [e.run_id for e in events if isinstance(e, ActivityScheduled)]
    assert runs == [f"{WF}/3", f"{WF}/8", f"{WF}/15"]
    assert await workflows.effects(f"{WF}/") == ["payments.authorize"] * 3
    row = await workflows.db.fetchrow(
        "SELECT status, start_command_id, last_sequence, closed_at IS NOT NULL AS closed, "
        "execution_deadline IS NOT NULL AS deadline FROM orchestrator.workflows WHERE workflow_id = $1",
        WF,
    )
    assert row is not None
    assert dict(row) == {
        "status": "completed",
        "start_command_id": "fourth",
        "last_sequence": len(events),
        "closed": True,
        "deadline": True,
    }
    # `slotflow replay` reads the published history and replays every run of it against the code.
    await wait_published(kafka, WF, len(events))
    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--workflow-id", WF, "--module", "tests.integration.orchestrator.flows"
    )
    assert code == 0, (out, err)
    assert out.startswith(f"ok  {WF}  tests.")
    assert f"{len(events)} events, 4 runs, completed" in out, out
