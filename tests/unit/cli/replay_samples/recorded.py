"""The code the test histories were recorded with: authorize, sleep an hour, capture."""

from datetime import timedelta
from typing import Any

from slotflow import workflow


@workflow.defn(name="samples.pay")
class Pay:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        auth = await workflow.execute_activity("payments.authorize", order)
        await workflow.sleep(timedelta(hours=1))
        result: dict[str, Any] = await workflow.execute_activity("payments.capture", auth)
        return result


@workflow.defn(name="samples.refund")
class Refund:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        await workflow.execute_activity("payments.refund", order)
