"""The example order saga (examples/orders) for the client tests: its classes, imported from the
examples folder as the services import them, and an order to start it with."""

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).parents[3] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from orders.models import Line, Order  # noqa: E402 - importable once examples/ is on the path
from orders.workflow import Checkout  # noqa: E402

__all__ = ["Checkout", "order"]


def order(
    order_id: str, amount_cents: int = 1200, *, hold: timedelta = timedelta(seconds=1), **more: Any
) -> Order:
    """A one-mug order held ``hold`` before its capture."""
    return Order(
        order_id=order_id,
        customer_id="c-7",
        amount_cents=amount_cents,
        card_token="tok_visa",
        lines=[Line(sku="mug", quantity=1)],
        hold=hold,
        **more,
    )
