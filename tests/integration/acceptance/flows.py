"""The workflow the acceptance tests start: it carries its input and a signal's payload into its
history and its result, so every hostile value reaches each place a workflow stores one."""

from typing import Any

from slotflow import workflow


@workflow.defn(name="acceptance.carry")
class Carry:
    """Waits for a `note` signal and returns what it was given."""

    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        note = await workflow.wait_signal("note")
        return {"input": data, "note": note}
