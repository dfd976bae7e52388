"""As first deployed: authorize, reserve, wait for `go`, capture."""

from typing import Any

from slotflow import workflow


@workflow.defn(name="tests.evolving")
class Evolving:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        await workflow.execute_activity("payments.authorize", order)
        await workflow.execute_activity("inventory.reserve", order)
        await workflow.wait_signal("go")
        await workflow.execute_activity("payments.capture", order)
        return {"version": 1}
