"""examples/orders itself (the workflow and activities users read), for the orchestrator's tests.

The example is imported as a claimer and an orchestrator import it with PYTHONPATH=examples; the
tests shorten its 24-hour hold with the order's `hold` and pick the declining sandbox card for a
capture that fails permanently.
"""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slotflow.runs import HandlerRegistry
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode, load_workflow_code

EXAMPLES = Path(__file__).parents[3] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from orders import activities  # noqa: E402 - importable once examples/ is on the path
from orders.activities import Sandbox as Sandbox  # noqa: E402 - importable once examples/ is on the path

WORKFLOW_MODULE = "orders.workflow"
WORKFLOW_TYPE = "orders.checkout"
#: The example's activities under the names its workflow schedules them by.
ACTIVITIES = {
    "payments.authorize": activities.authorize,
    "inventory.reserve": activities.reserve,
    "payments.capture": activities.capture,
    "inventory.release": activities.release,
    "payments.void": activities.void,
}
SANDBOX = activities.SANDBOX


def order(order_id: str, *, capture_declined: bool = False, hold: str = "PT1S") -> dict[str, Any]:
    """An `orders.models.Order` as JSON input: a short hold, and the declining card if asked."""
    return {
        "order_id": order_id,
        "customer_id": "c-7",
        "amount_cents": 9990,
        "card_token": activities.DECLINES_CAPTURE if capture_declined else "tok_visa",
        "lines": [{"sku": "mug", "quantity": 2}],
        "hold": hold,
    }


def orders_workflow_code() -> RuntimeWorkflowCode:
    return load_workflow_code([WORKFLOW_MODULE])


def orders_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    for name, fn in ACTIVITIES.items():
        registry.register(name, fn)
    return registry


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """The example's sandbox gateway and warehouse, empty before and after the test."""
    SANDBOX.clear()
    yield SANDBOX
    SANDBOX.clear()
