"""A workflow that does everything through the runtime: the static check finds nothing here."""

import asyncio
import random
from datetime import UTC, datetime, timedelta

from slotflow import workflow
from slotflow.runs.context import RunContext
from slotflow.runs.registry import handler


@handler("samples.charge")
async def charge(ctx: RunContext) -> dict[str, str]:
    """An activity: host I/O, the clock and randomness are fine here, outside workflow code."""
    await asyncio.sleep(random.random() / 100)
    return {"charged_at": datetime.now(UTC).isoformat()}


def total(items: list[int]) -> int:
    """A pure helper the workflow calls."""
    return sum(items)


@workflow.defn(name="samples.clean")
class Clean:
    def __init__(self) -> None:
        self.approved = False

    @workflow.run
    async def run(self, items: list[int]) -> dict[str, object]:
        started = workflow.now()
        token = workflow.uuid4()
        jitter = workflow.random()
        await workflow.sleep(timedelta(hours=24))
        await workflow.wait_condition(lambda: self.approved, timeout=timedelta(days=1))
        charges = [workflow.execute_activity("samples.charge", {"item": item}) for item in items]
        results = await workflow.gather(*charges)
        first = workflow.create_task(self.step(1))
        both = await workflow.gather(first, self.step(2))
        elapsed: timedelta = workflow.now() - started
        return {
            "total": total(items),
            "token": str(token),
            "jitter": jitter,
            "results": results,
            "both": both,
            "elapsed": elapsed.total_seconds(),
        }

    async def step(self, n: int) -> int:
        return n

    @workflow.signal
    async def approve(self) -> None:
        self.approved = True
