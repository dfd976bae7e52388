"""`samples.pay` changed safely: the new step runs only in histories recorded with the patch."""

from datetime import timedelta
from typing import Any

from slotflow import workflow


@workflow.defn(name="samples.pay")
class Pay:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        auth = await workflow.execute_activity("payments.authorize", order)
        await workflow.sleep(timedelta(hours=1))
        if workflow.patched("fraud-check"):
            await workflow.execute_activity("fraud.check", auth)
        result: dict[str, Any] = await workflow.execute_activity("payments.capture", auth)
        return result
