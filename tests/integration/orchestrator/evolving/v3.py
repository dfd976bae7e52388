"""The same reorder behind `workflow.patched`: new runs reserve first, v1's histories keep their path."""

from typing import Any

from slotflow import workflow


@workflow.defn(name="tests.evolving")
class Evolving:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        if workflow.patched("reserve-first"):
            await workflow.execute_activity("inventory.reserve", order)
            await workflow.execute_activity("payments.authorize", order)
        else:
            await workflow.execute_activity("payments.authorize", order)
            await workflow.execute_activity("inventory.reserve", order)
        await workflow.wait_signal("go")
        await workflow.execute_activity("payments.capture", order)
        return {"version": 3}
