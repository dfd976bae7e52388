"""The workflows the orchestrator benchmark runs (SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES)."""

import os
from datetime import timedelta
from typing import Any

from slotflow import workflow

#: The timer between the two activities: zero by default. A checkout whose SDK refuses a zero
#: duration (before zero-length sleeps existed) is run with BENCH_TIMER_SECONDS=0.001.
TIMER = timedelta(seconds=float(os.environ.get("BENCH_TIMER_SECONDS", "0")))


@workflow.defn(name="bench.two_steps")
class TwoSteps:
    """Two activities and a zero-length durable timer between them: the timer is recorded
    (TimerStarted, WorkflowTimerFired) and fired by the decision that started it, so three
    decisions a workflow (four, and a ticker round trip, with a timer that is not zero)."""

    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("bench.noop", data)
        await workflow.sleep(TIMER)
        await workflow.execute_activity("bench.noop", data)
        return {"done": True}


@workflow.defn(name="bench.waits")
class Waits:
    """Open until its signal comes (the recovery benchmark's 10,000 open workflows)."""

    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        await workflow.wait_signal("go")
        return {"done": True}
