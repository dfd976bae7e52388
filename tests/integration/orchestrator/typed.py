"""Activities named by their handler function, as a user writes them: `@handler` functions that take
a typed input and return a typed result, and workflows that pass the functions themselves. The
orchestrator imports this module for the workflows (the decorators mark the functions), the
claimer runs the handlers from `TYPED` (a registry of its own, so the names never collide)."""

from typing import Any

from pydantic import BaseModel

from slotflow import workflow
from slotflow.runs import HandlerRegistry, RunContext, handler

TYPED = HandlerRegistry()


class ChargeCard(BaseModel):
    order_id: str
    amount_cents: int


class Charge(BaseModel):
    charge_id: str
    amount_cents: int


@handler("tests.typed.charge", registry=TYPED)
async def charge_card(ctx: RunContext, card: ChargeCard) -> Charge:
    # The claimer validated the payload into ChargeCard before calling.
    if not isinstance(card, ChargeCard):
        raise TypeError(f"expected a ChargeCard, got {type(card).__name__}")
    return Charge(charge_id=f"ch-{ctx.run_id}", amount_cents=card.amount_cents)


@workflow.defn(name="tests.typed_checkout")
class TypedCheckout:
    """Charges by the handler function, then by its name with a payload that does not fit when
    asked to (the claimer refuses it: a permanent failure, one attempt)."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        charge = await workflow.execute_activity(
            charge_card, ChargeCard(order_id=order["order_id"], amount_cents=order["amount_cents"])
        )
        if order.get("bad_payload_by_name"):
            await workflow.execute_activity(
                "tests.typed.charge", {"order_id": order["order_id"], "amount_cents": "lots"}
            )
        return {"charge_type": type(charge).__name__, **charge.model_dump()}


@workflow.defn(name="tests.typed_wrong_argument")
class TypedWrongArgument:
    """Passes the handler an argument its input type refuses: the workflow fails at the call."""

    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        await workflow.execute_activity(charge_card, {"order_id": order["order_id"], "amount_cents": "lots"})
