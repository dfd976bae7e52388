"""A handler deployed later: the claimer process of the Kafka security test that loads this module
too (SLOTFLOW_CLAIMER_HANDLER_MODULES) is the deploy that fixes an unknown handler."""

from slotflow.runs import RunContext, handler


@handler("secure.later")
async def later(ctx: RunContext) -> object:
    return {"settled": ctx.run_id, "attempt": ctx.attempt}
