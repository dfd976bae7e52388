"""slotflow.testing.run_context: unit-testing a handler the way a user would."""

from datetime import UTC, datetime

import pytest

from slotflow.core.identity import NaiveDatetime
from slotflow.errors import ConfigurationError
from slotflow.runs import HandlerRegistry, PermanentError, RunContext
from slotflow.testing import run_context

registry = HandlerRegistry()


async def pay(ctx: RunContext) -> dict[str, object]:
    amount = ctx.payload.get("amount_cents")
    if not isinstance(amount, int) or amount <= 0:
        raise PermanentError(f"{ctx.run_id}: amount_cents must be a positive integer")
    return {"run": ctx.run_id, "attempt": ctx.attempt, "paid": amount}


registry.register("payouts.pay", pay)


async def test_a_handler_runs_on_a_context_built_like_the_claimers() -> None:
    ctx = run_context({"amount_cents": 500}, job_id="payouts.nightly", attempt=2)
    assert await registry.get("payouts.pay")(ctx) == {
        "run": "payouts.nightly@2030-01-01T02:00:00Z",
        "attempt": 2,
        "paid": 500,
    }
    slot = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert run_context(job_id="j", slot=slot).run_id == "j@2026-03-29T01:00:00Z"
    assert run_context(workflow_id="order-7", sequence=4, kind="activity").run_id == "order-7/4"


async def test_a_handlers_permanent_failure_and_missing_database_are_visible() -> None:
    with pytest.raises(PermanentError, match="positive integer"):
        await pay(run_context({"amount_cents": -1}))
    with pytest.raises(ConfigurationError, match="no handler database"):
        await run_context().fenced.upsert(table="ledger", key={"run_id": "r"}, values={"x": 1})
    with pytest.raises(NaiveDatetime):
        run_context(slot=datetime(2030, 1, 1))  # noqa: DTZ001 - the naive slot is the point
