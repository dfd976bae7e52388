"""The workflow the orchestrator benchmark runs (SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES)."""

from datetime import timedelta
from typing import Any

from slotflow import workflow


@workflow.defn(name="bench.two_steps")
class TwoSteps:
    """Two activities and a (near) zero-length durable timer between them: four decisions a workflow."""

    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("bench.noop", data)
        # The SDK refuses a zero duration (ValueError); one millisecond is the shortest timer.
        await workflow.sleep(timedelta(milliseconds=1))
        await workflow.execute_activity("bench.noop", data)
        return {"done": True}
