"""Handlers the claimer benchmarks load into claimer processes (SLOTFLOW_CLAIMER_HANDLER_MODULES)."""

import asyncio

from slotflow.runs import RunContext, handler


@handler("bench.noop")
async def noop(ctx: RunContext) -> None:
    """Does nothing: what is left is the claimer's own cost per run."""


@handler("bench.hold_first_claim")
async def hold_first_claim(ctx: RunContext) -> None:
    """Holds the first claim (the benchmark kills its claimer); a takeover returns at once."""
    if ctx.fence_token == 1:
        await asyncio.sleep(3600)
