"""`samples.pay` with its second activity renamed: old histories no longer replay."""

from datetime import timedelta
from typing import Any

from slotflow import workflow


@workflow.defn(name="samples.pay")
class Pay:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        auth = await workflow.execute_activity("payments.authorize", order)
        await workflow.sleep(timedelta(hours=1))
        result: dict[str, Any] = await workflow.execute_activity("payments.charge", auth)
        return result
