"""The workflow the orchestrator benchmark runs (SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES)."""

from datetime import timedelta
from typing import Any

from slotflow import workflow


@workflow.defn(name="bench.two_steps")
class TwoSteps:
    """Two activities and a zero-length durable timer between them: the timer is recorded
    (TimerStarted, WorkflowTimerFired) and fired by the decision that started it, so three
    decisions a workflow."""

    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("bench.noop", data)
        await workflow.sleep(timedelta(0))
        await workflow.execute_activity("bench.noop", data)
        return {"done": True}
