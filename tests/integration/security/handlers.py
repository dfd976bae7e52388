"""Handlers the claimer process of the Kafka security test loads (SLOTFLOW_CLAIMER_HANDLER_MODULES)."""

from slotflow.runs import PermanentError, RunContext, handler


@handler("secure.settle")
async def settle(ctx: RunContext) -> object:
    return {"settled": ctx.run_id}


@handler("secure.refuse")
async def refuse(ctx: RunContext) -> object:
    """Fails for good: the claimer dead-letters the run, and the dlq parks the letter."""
    raise PermanentError(f"refused {ctx.run_id} on purpose")
