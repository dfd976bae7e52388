"""Workflow code never escapes its workflow: whatever it raises, `SystemExit` and other
`BaseException`s included, fails that workflow with the exception, and the orchestrator and its
other workflows carry on (issue 20's first bug, in the orchestrator: the decision let a
`SystemExit` from workflow code end the process, and every orchestrator that took the workflow's
shard over would have died the same way)."""

from slotflow.contracts import WorkflowCompleted, WorkflowFailed
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.orchestrator.conftest import StartOrchestrator
from tests.integration.orchestrator.support import Workflows


async def test_system_exit_and_base_exceptions_in_workflow_code_fail_only_their_workflow(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_orchestrator_: StartOrchestrator
) -> None:
    running = await start_orchestrator_()
    workflows = Workflows(kafka, producer, db)
    for workflow_id, workflow_type in (("exit-1", "tests.exits"), ("melt-1", "tests.melts")):
        await workflows.start(workflow_id, workflow_type, {"order_id": workflow_id}, f"start-{workflow_id}")
    await workflows.start("echo-1", "tests.echo", {"order_id": "echo-1"}, "start-echo-1")
    for workflow_id, error_type, message in (
        ("exit-1", "SystemExit", "workflow code gave up on exit-1"),
        ("melt-1", "Meltdown", "core temperature exceeded"),
    ):
        failed = (await workflows.wait(workflow_id, "workflow.failed"))[-1]
        assert isinstance(failed, WorkflowFailed)
        assert (failed.error_type, failed.message) == (error_type, message)
    done = (await workflows.wait("echo-1", "workflow.completed"))[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"order_id": "echo-1"}
    assert running.task is not None
    assert not running.task.done()
