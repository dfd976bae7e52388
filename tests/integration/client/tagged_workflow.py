"""A workflow that tags itself as it goes, for the search-attribute tests on the real stack (the
orchestrator imports it by name: `tests.integration.client.tagged_workflow`)."""

from typing import Any

from slotflow import workflow


@workflow.defn(name="tests.tagged_order")
class TaggedOrder:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        workflow.upsert_search_attributes({"Stage": "paid", "Coupon": None})
        shipment = await workflow.wait_signal("ship")
        workflow.upsert_search_attributes({"Stage": "shipped", "Parcels": int(shipment.get("parcels", 1))})
        workflow.upsert_memo({"tracking": shipment.get("tracking", "none")})
        return {"memo": workflow.memo(), "attributes": sorted(workflow.info().search_attributes)}
