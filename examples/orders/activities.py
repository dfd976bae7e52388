"""The saga's five steps as `@handler` functions, run by claimers as the workflow's activities.

Each activity runs with run id `{workflow_id}/{sequence}`, the same on every attempt, and uses it
as its idempotency key with the outside service, so a retried or redelivered attempt has its
effect once. The payment gateway and the warehouse here are an in-process sandbox (`SANDBOX`) that
records every effect, keyed by that run id; a real deployment calls their APIs with the run id as
the idempotency key instead.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orders.models import Authorization, Order, Receipt, Reservation
from slotflow.errors import PermanentError
from slotflow.runs import RunContext, handler

#: The sandbox card that authorizes but whose capture is declined (the saga's failure path).
DECLINES_CAPTURE = "tok_capture_declined"


class CaptureDeclined(PermanentError):
    """The gateway refused to capture the authorization; retrying cannot change its answer."""


@dataclass
class Sandbox:
    """The outside services' effects, in the order they happened, once per idempotency key."""

    effects: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    #: Every call, retries and refusals included, by activity name.
    attempts: Counter[str] = field(default_factory=Counter)

    def apply(self, key: str, action: str, detail: dict[str, Any]) -> dict[str, Any]:
        # The same key twice is the same request retried: the first answer stands.
        return self.effects.setdefault(key, (action, detail))[1]

    def journal(self) -> list[str]:
        """The effects that happened, oldest first."""
        return [action for action, _ in self.effects.values()]

    def journal_of(self, workflow_id: str) -> list[str]:
        """The effects of one workflow's activities (run ids `{workflow_id}/{sequence}`), oldest first."""
        prefix = f"{workflow_id}/"
        return [action for key, (action, _) in self.effects.items() if key.startswith(prefix)]

    def clear(self) -> None:
        self.effects.clear()
        self.attempts.clear()


#: The payment gateway and the warehouse of this example (one journal, so their order shows).
SANDBOX = Sandbox()


@handler("payments.authorize")
async def authorize(ctx: RunContext) -> dict[str, Any]:
    SANDBOX.attempts["payments.authorize"] += 1
    order = Order.model_validate(ctx.payload)
    auth = Authorization(
        authorization_id=f"auth-{order.order_id}",
        order_id=order.order_id,
        amount_cents=order.amount_cents,
        card_token=order.card_token,
    )
    return SANDBOX.apply(ctx.run_id, "payments.authorize", auth.model_dump())


@handler("inventory.reserve")
async def reserve(ctx: RunContext) -> dict[str, Any]:
    SANDBOX.attempts["inventory.reserve"] += 1
    order = Order.model_validate(ctx.payload)
    reservation = Reservation(
        reservation_id=f"res-{order.order_id}", order_id=order.order_id, lines=order.lines
    )
    return SANDBOX.apply(ctx.run_id, "inventory.reserve", reservation.model_dump())


@handler("payments.capture")
async def capture(ctx: RunContext) -> dict[str, Any]:
    SANDBOX.attempts["payments.capture"] += 1
    auth = Authorization.model_validate(ctx.payload)
    # Decided from the authorization alone, so any claimer process answers the same.
    if auth.card_token == DECLINES_CAPTURE:
        raise CaptureDeclined(f"capture of {auth.authorization_id} declined by the issuer")
    receipt = Receipt(
        order_id=auth.order_id, capture_id=f"cap-{auth.order_id}", amount_cents=auth.amount_cents
    )
    return SANDBOX.apply(ctx.run_id, "payments.capture", receipt.model_dump())


@handler("inventory.release")
async def release(ctx: RunContext) -> dict[str, Any]:
    SANDBOX.attempts["inventory.release"] += 1
    reservation = Reservation.model_validate(ctx.payload)
    return SANDBOX.apply(ctx.run_id, "inventory.release", {"reservation_id": reservation.reservation_id})


@handler("payments.void")
async def void(ctx: RunContext) -> dict[str, Any]:
    SANDBOX.attempts["payments.void"] += 1
    auth = Authorization.model_validate(ctx.payload)
    return SANDBOX.apply(ctx.run_id, "payments.void", {"authorization_id": auth.authorization_id})
