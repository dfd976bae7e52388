"""Workflow handles against the whole system as processes on the real Kafka and PostgreSQL.

The example order saga (examples/orders) started by its class's run method: the handle's `result()`
is the typed `Receipt`; a declined capture raises `WorkflowFailedError` with the activity's error
type, after the saga compensated; a held order cancelled through its handle raises
`WorkflowCancelledError`; `execute_workflow` over the Kafka transport (reads through the api) waits
for its start's acknowledgement on the topic, then for the result; a start refused as a duplicate
raises from `result()` instead of answering with the other run's result.
"""

import sys
from datetime import timedelta
from pathlib import Path
from typing import assert_type

import pytest

from slotflow.client import (
    Client,
    CommandRejected,
    Conflict,
    HttpTransport,
    KafkaTransport,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowHandle,
    WorkflowRejectedError,
)
from slotflow.testing import assert_eventually
from tests.integration.client.conftest import Stack
from tests.integration.client.orders import Checkout, order

EXAMPLES = Path(__file__).parents[3] / "examples"
WAIT = 30.0
#: How long a handle waits for the saga's end (a second's hold, four activities, a loaded machine).
RESULT_WITHIN = 120.0


async def test_a_workflow_started_by_its_run_method_gives_its_typed_result_or_its_end_as_an_error(
    stack: Stack, http: HttpTransport, kafka_transport: KafkaTransport
) -> None:
    # The test process imports the example as the services do (PYTHONPATH=examples).
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from orders.activities import DECLINES_CAPTURE
    from orders.models import Line, Order, Receipt
    from orders.workflow import Checkout

    def order(order_id: str, *, card: str = "tok_visa", hold: timedelta = timedelta(seconds=1)) -> Order:
        return Order(
            order_id=order_id,
            customer_id="c-7",
            amount_cents=9990,
            card_token=card,
            lines=[Line(sku="mug", quantity=2)],
            hold=hold,
        )

    client = Client(http)

    # Completed: the result is the run method's return type, validated from the api's JSON.
    handle = await client.start_workflow(Checkout.run, order("typed-1"), id="typed-1")
    assert_type(handle, WorkflowHandle[Receipt])
    assert handle.workflow_type == "orders.checkout"
    receipt = await handle.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    assert isinstance(receipt, Receipt)
    assert (receipt.order_id, receipt.capture_id, receipt.amount_cents) == ("typed-1", "cap-typed-1", 9990)

    # Failed: the capture is declined (a non-retryable CaptureDeclined); the saga releases the
    # stock and voids the authorization, and the run fails with the activity's error type.
    declined = await client.start_workflow(
        Checkout.run, order("declined-1", card=DECLINES_CAPTURE), id="declined-1"
    )
    with pytest.raises(WorkflowFailedError) as failed:
        await declined.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    assert failed.value.workflow_id == "declined-1"
    assert failed.value.failure_type == "CaptureDeclined", failed.value
    assert "declined by the issuer" in failed.value.failure_message
    assert failed.value.compensated is True

    # Cancelled through its handle while it holds for an hour: the saga undoes both steps.
    held = await client.start_workflow(
        Checkout.run, order("held-1", hold=timedelta(hours=1)), id="held-1", wait=WAIT
    )
    assert held.sent is not None
    assert held.sent.outcome is not None
    assert held.sent.outcome.status == "accepted"
    await held.cancel("customer asked", wait=WAIT)
    with pytest.raises(WorkflowCancelledError) as cancelled:
        await held.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    assert (cancelled.value.reason, cancelled.value.compensated) == ("customer asked", True)
    described = await held.describe()
    assert described.status == "cancelled"

    # A second start of a taken id is refused: its handle raises, and never answers with the
    # completed run's receipt that the api shows under that id.
    again = await client.start_workflow(Checkout.run, order("typed-1"), id="typed-1")
    with pytest.raises(WorkflowRejectedError, match="already exists"):
        await again.result(timeout=RESULT_WITHIN, poll_interval=0.3)

    # execute_workflow over Kafka: the start's acknowledgement is read from the events topic,
    # then the result through the api.
    over_kafka = Client(kafka_transport, reads=http)
    kafka_receipt = await over_kafka.execute_workflow(
        Checkout.run, order("typed-kafka"), id="typed-kafka", result_timeout=RESULT_WITHIN
    )
    assert_type(kafka_receipt, Receipt)
    assert kafka_receipt.capture_id == "cap-typed-kafka"

    # A handle by id, for a workflow started elsewhere, typed by result_type.
    by_id = client.get_workflow_handle("typed-1", result_type=Receipt)
    assert await by_id.result(timeout=WAIT) == receipt


async def test_a_handle_on_a_reused_workflow_id_answers_with_its_own_run(
    stack: Stack, http: HttpTransport
) -> None:
    """An id reused after its run closed (`allow_after_close`) holds two runs; each start's handle
    answers with its own run's result, and a handle by id alone follows the newest.

    Before handles followed their start's run, the first handle read after the second run ended
    answered with the second run's receipt (the api shows the newest run under the id), and the
    second handle could answer with the first run's while the api still showed it."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from orders.models import Line, Order, Receipt
    from orders.workflow import Checkout

    def order(order_id: str, amount_cents: int) -> Order:
        return Order(
            order_id=order_id,
            customer_id="c-7",
            amount_cents=amount_cents,
            card_token="tok_visa",
            lines=[Line(sku="mug", quantity=1)],
            hold=timedelta(seconds=1),
        )

    client = Client(http)
    first = await client.start_workflow(Checkout.run, order("first", 1000), id="reused-1")
    first_receipt = await first.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    assert (first_receipt.order_id, first_receipt.amount_cents) == ("first", 1000)

    second = await client.start_workflow(
        Checkout.run, order("second", 2000), id="reused-1", id_reuse_policy="allow_after_close"
    )
    assert first.sent is not None
    assert second.sent is not None
    assert second.start_command_id == second.sent.command_id != first.start_command_id
    second_receipt = await second.result(timeout=RESULT_WITHIN, poll_interval=0.1)
    assert (second_receipt.order_id, second_receipt.amount_cents) == ("second", 2000)

    # The api now shows the second run under the id; the first handle still reads its own.
    assert await first.result(timeout=WAIT) == first_receipt
    shown_first = await first.describe()
    assert (shown_first.status, shown_first.start_command_id, shown_first.runs) == (
        "completed",
        first.sent.command_id,
        1,
    )
    newest = client.get_workflow_handle("reused-1", result_type=Receipt)
    assert await newest.result(timeout=WAIT) == second_receipt
    assert (await newest.describe()).runs == 2
    by_start = client.get_workflow_handle(
        "reused-1", result_type=Receipt, start_command_id=first.sent.command_id
    )
    assert await by_start.result(timeout=WAIT) == first_receipt


async def test_a_handle_of_an_ended_run_never_cancels_the_new_run_of_its_reused_id(
    stack: Stack, http: HttpTransport, kafka_transport: KafkaTransport
) -> None:
    """A signal, cancel or terminate through a handle reaches only its own run. Once the id was
    reused, the first run's handle is refused: by the api (409, nothing published) and, over Kafka
    where no api looks, by the orchestrator (CommandRejected). Before, the stale handle's cancel
    reached the new run and compensated an order that had nothing to do with it."""
    held = order("stale-1", 1500, hold=timedelta(minutes=10))
    client = Client(http)
    first = await client.start_workflow(Checkout.run, held, id="stale-1")
    await first.terminate("replaced by a new order", wait=WAIT)
    second = await client.start_workflow(
        Checkout.run, held, id="stale-1", id_reuse_policy="allow_after_close"
    )
    assert second.sent is not None

    async def second_shown() -> bool:
        return (await client.get_workflow("stale-1")).start_command_id == second.start_command_id

    await assert_eventually(second_shown, timeout=WAIT, message="the api shows the second run")
    with pytest.raises(Conflict, match="current run was started by command"):
        await first.cancel("meant for the first order", wait=WAIT)
    with pytest.raises(Conflict, match="current run was started by command"):
        await first.signal("approved", {"by": "ops"}, wait=WAIT)

    over_kafka = Client(kafka_transport, reads=http)
    stale = over_kafka.get_workflow_handle("stale-1", start_command_id=first.start_command_id)
    with pytest.raises(CommandRejected, match="current run was started by command"):
        await stale.terminate("meant for the first order", wait=WAIT)

    # The second run never heard of them: it is still holding, and its own handle reaches it.
    assert (await second.describe()).status == "running"
    await second.cancel("customer asked", wait=WAIT)
    with pytest.raises(WorkflowCancelledError):
        await second.result(timeout=RESULT_WITHIN, poll_interval=0.3)
