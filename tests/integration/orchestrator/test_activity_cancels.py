"""A workflow's cancel reaches its running activity on the real stack (orchestrator, claimer): the
handler sees CancelledError mid-work, no retry, the run ends `cancelled`; the workflow sees its own
cancellation (or, when its code cancelled the step, goes on). The orchestrator's record of each
cancel is what the claimer checks the request against."""

import asyncio
import json

from slotflow.contracts import CancelWorkflow, SignalWorkflow, TerminateWorkflow, WorkflowCancelled
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from tests.integration.claimer.support import run_row, wait_state
from tests.integration.orchestrator.flows import LONG_STEP
from tests.integration.orchestrator.support import Workflows


class LongStep:
    """The long step: heartbeats every 0.1 s for a minute; says what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.entered = asyncio.Event()

    async def __call__(self, ctx: RunContext) -> str:
        self.seen.append(f"attempt {ctx.attempt}")
        self.entered.set()
        try:
            for chunk in range(600):
                ctx.heartbeat({"chunk": chunk})
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.seen.append("cancelled")  # its cleanup runs here
            raise
        self.seen.append("finished")
        return "done"


async def _abandoned(db: Pool, run_id: str) -> dict[str, object]:
    row = await wait_state(db, run_id, "cancelled")
    assert row["attempt"] == 1
    history = json.loads(str(row["history"]))
    assert [entry["event"] for entry in history] == ["cancelled"]
    recorded = await db.fetchrow(
        "SELECT run_id, handler, reason FROM orchestrator.activity_cancels WHERE run_id = $1", run_id
    )
    assert recorded is not None
    assert recorded["handler"] == LONG_STEP
    return {"row": row, "reason": recorded["reason"]}


async def test_a_cancelled_workflow_cancels_its_running_activity(
    registry: HandlerRegistry, workflows: Workflows
) -> None:
    step = LongStep()
    registry.register(LONG_STEP, step)
    await workflows.start("ac-1", "tests.long_step", {"order_id": "ac-1"}, "start-ac-1")
    await asyncio.wait_for(step.entered.wait(), 60)
    await asyncio.sleep(0.3)  # mid-work
    await workflows.send(CancelWorkflow(workflow_id="ac-1", reason="customer cancelled"), "cancel-ac-1")
    events = await workflows.wait("ac-1", "workflow.cancelled")
    assert isinstance(events[-1], WorkflowCancelled)
    found = await _abandoned(workflows.db, "ac-1/2")
    assert found["reason"] == "workflow ac-1 was cancelled: customer cancelled"
    assert step.seen == ["attempt 1", "cancelled"]
    await asyncio.sleep(1.0)  # no retry comes
    assert step.seen == ["attempt 1", "cancelled"]
    assert not any(
        e.message_type in ("workflow.activity_completed", "workflow.activity_failed") for e in events
    )


async def test_a_terminated_workflow_cancels_its_running_activity(
    registry: HandlerRegistry, workflows: Workflows
) -> None:
    step = LongStep()
    registry.register(LONG_STEP, step)
    await workflows.start("ac-2", "tests.long_step", {"order_id": "ac-2"}, "start-ac-2")
    await asyncio.wait_for(step.entered.wait(), 60)
    await workflows.send(TerminateWorkflow(workflow_id="ac-2", reason="stuck"), "terminate-ac-2")
    await workflows.wait("ac-2", "workflow.failed")
    found = await _abandoned(workflows.db, "ac-2/2")
    assert found["reason"] == "workflow ac-2 was terminated: stuck"
    assert step.seen == ["attempt 1", "cancelled"]


async def test_workflow_code_that_cancels_its_step_cancels_the_activity_and_goes_on(
    registry: HandlerRegistry, workflows: Workflows
) -> None:
    step = LongStep()
    registry.register(LONG_STEP, step)
    await workflows.start("ac-3", "tests.abandons_step", {"order_id": "ac-3"}, "start-ac-3")
    await asyncio.wait_for(step.entered.wait(), 60)
    await workflows.send(SignalWorkflow(workflow_id="ac-3", signal="stop", payload={}), "stop-ac-3")
    events = await workflows.wait("ac-3", "workflow.completed")
    assert events[-1].result == "abandoned"  # type: ignore[attr-defined]
    found = await _abandoned(workflows.db, "ac-3/2")
    assert found["reason"] == "workflow ac-3 cancelled the activity"
    assert step.seen == ["attempt 1", "cancelled"]
    row = await run_row(workflows.db, "ac-3/2")
    assert row is not None
    assert row["cancel_requested"] is True
