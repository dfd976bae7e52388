"""Handlers the claimer process of the Kafka security test loads (SLOTFLOW_CLAIMER_HANDLER_MODULES)."""

from slotflow.runs import RunContext, handler


@handler("secure.settle")
async def settle(ctx: RunContext) -> object:
    return {"settled": ctx.run_id}
