"""Handlers a claimer subprocess loads in the logging test (SLOTFLOW_CLAIMER_HANDLER_MODULES)."""

from slotflow.errors import TransientError
from slotflow.runs import RunContext, handler


@handler("logs.always_times_out")
async def always_times_out(ctx: RunContext) -> object:
    raise TransientError(f"bank API timed out on attempt {ctx.attempt}")
