"""Module-level handlers a process pool can import by name (a spawned worker unpickles them)."""

import os
from typing import Any

from slotflow.runs import RunContext


def digest(ctx: RunContext) -> dict[str, Any]:
    """CPU-bound work for the process pool: it reports the pid it ran in."""
    total = sum(i * i for i in range(int(ctx.payload.get("n", 1000))))
    return {"total": total, "pid": os.getpid(), "token": ctx.fence_token, "pool": ctx.pool is None}
