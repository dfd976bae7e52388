"""The reorder shipped as is: reserve before authorize. Histories recorded by v1 no longer replay."""

from typing import Any

from slotflow import workflow


@workflow.defn(name="tests.evolving")
class Evolving:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("inventory.reserve", order)
        await workflow.execute_activity("payments.authorize", order)
        await workflow.wait_signal("go")
        await workflow.execute_activity("payments.capture", order)
        return {"version": 2}
