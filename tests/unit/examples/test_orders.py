"""The seed's order saga (examples/orders) in WorkflowEnvironment: 24 hours of sleep in milliseconds,
a declined capture undone in reverse order, and code that passes the static check and replays."""

import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from slotflow.contracts import (
    ActivityScheduled,
    CompensationRegistered,
    TimerStarted,
    WorkflowCancelled,
    WorkflowFailed,
)
from slotflow.workflow import Replayer
from slotflow.workflow.check import check_modules
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError

EXAMPLES = Path(__file__).parents[3] / "examples"


def orders() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The example's modules, imported as the claimer would with PYTHONPATH=examples."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import orders.activities
    import orders.models
    import orders.workflow

    return orders.workflow, orders.activities, orders.models


@pytest.fixture(autouse=True)
def sandbox() -> Iterator[None]:
    _, activities, _ = orders()
    activities.SANDBOX.clear()
    yield
    activities.SANDBOX.clear()


def order(card: str) -> object:
    _, _, models = orders()
    return models.Order(
        order_id="1042",
        customer_id="c-7",
        amount_cents=9990,
        card_token=card,
        lines=[models.Line(sku="mug", quantity=2)],
    )


async def test_an_order_is_captured_after_the_24_hour_hold() -> None:
    workflow, activities, models = orders()
    async with WorkflowEnvironment([workflow.Checkout], replay_every_step=True) as env:
        start = env.now

        result = await env.execute_workflow(workflow.Checkout, order("tok_visa"), id="order-1042")

        receipt = models.Receipt.model_validate(result)
        assert (receipt.capture_id, receipt.amount_cents) == ("cap-1042", 9990)
        assert env.now - start >= timedelta(hours=24)  # virtual: the test takes milliseconds
        history = env.history("order-1042")
    assert activities.SANDBOX.journal() == ["payments.authorize", "inventory.reserve", "payments.capture"]
    (timer,) = [e for e in history if isinstance(e, TimerStarted)]
    assert timer.fire_at - start == timedelta(hours=24)


async def test_a_declined_capture_releases_the_stock_then_voids_the_authorization() -> None:
    workflow, activities, _ = orders()
    async with WorkflowEnvironment([workflow.Checkout], replay_every_step=True) as env:
        start = env.now
        with pytest.raises(WorkflowFailureError) as failed:
            await env.execute_workflow(workflow.Checkout, order(activities.DECLINES_CAPTURE), id="order-1042")
        history = env.history("order-1042")

    assert failed.value.compensated is True
    assert env.now - start >= timedelta(hours=24)
    # The effects, in the order they happened: the undo runs newest first.
    assert activities.SANDBOX.journal() == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]
    # Permanent: the declined capture is not retried.
    assert activities.SANDBOX.attempts["payments.capture"] == 1
    scheduled = {e.sequence: e for e in history if isinstance(e, ActivityScheduled)}
    forward = {e.activity: seq for seq, e in scheduled.items() if not e.compensation}
    undo = [(e.activity, e.compensates) for e in scheduled.values() if e.compensation]
    assert undo == [
        ("inventory.release", forward["inventory.reserve"]),
        ("payments.void", forward["payments.authorize"]),
    ]
    registered = [e.activity for e in history if isinstance(e, CompensationRegistered)]
    assert registered == ["payments.void", "inventory.release"]
    assert isinstance(history[-1], WorkflowFailed)
    assert history[-1].compensated is True
    # The recorded history replays against the code: safe to redeploy as it is.
    assert Replayer([workflow.Checkout]).replay(history).status == "failed"


async def test_a_cancel_during_the_hold_releases_the_stock_then_voids_the_authorization() -> None:
    """The example's `async with Saga()` compensates on a cancel too (before, a cancel during the
    hold left the authorization and the stock held: "cancelled (not compensated)")."""
    workflow, activities, _ = orders()
    async with WorkflowEnvironment([workflow.Checkout], replay_every_step=True) as env:
        handle = await env.start_workflow(workflow.Checkout, order("tok_visa"), id="order-1042")
        await env.sleep(timedelta(hours=3))
        await env.cancel("order-1042", "customer cancelled")
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
        history = env.history("order-1042")

    assert ended.value.cancelled
    assert ended.value.compensated is True
    assert activities.SANDBOX.journal() == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]
    assert "payments.capture" not in activities.SANDBOX.attempts
    assert isinstance(history[-1], WorkflowCancelled)
    assert Replayer([workflow.Checkout]).replay(history).status == "cancelled"


def test_the_example_passes_the_static_check() -> None:
    result = check_modules([str(EXAMPLES / "orders")])

    assert "Checkout (orders.checkout)" in result.workflows
    assert result.findings == ()
