"""`SyncClient` against the whole system as processes on the real Kafka and PostgreSQL: the same
calls without `await`, from a plain thread with no event loop (a script) and from inside a running
event loop (this test's), each on its private loop; closed, it refuses calls."""

import asyncio
import sys
from pathlib import Path
from typing import assert_type

import pytest

from slotflow.client import (
    ClientClosed,
    HttpTransport,
    SyncClient,
    SyncWorkflowHandle,
    WorkflowRejectedError,
)
from tests.integration.client.conftest import ADMIN_TOKEN, Stack

EXAMPLES = Path(__file__).parents[3] / "examples"
RESULT_WITHIN = 120.0


async def test_the_sync_client_works_from_a_script_and_from_inside_a_running_loop(stack: Stack) -> None:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from datetime import timedelta

    from orders.models import Line, Order, Receipt
    from orders.workflow import Checkout

    def order(order_id: str) -> Order:
        return Order(
            order_id=order_id,
            customer_id="c-7",
            amount_cents=1250,
            card_token="tok_visa",
            lines=[Line(sku="mug", quantity=1)],
            hold=timedelta(seconds=1),
        )

    def script() -> Receipt:
        # What a plain script does: no event loop of its own anywhere in this thread.
        with SyncClient(HttpTransport(stack.api_url, token=ADMIN_TOKEN)) as client:
            handle = client.start_workflow(Checkout.run, order("sync-script"), id="sync-script", wait=30)
            assert_type(handle, SyncWorkflowHandle[Receipt])
            assert handle.sent is not None
            assert handle.sent.outcome is not None
            return handle.result(timeout=RESULT_WITHIN, poll_interval=0.3)

    receipt = await asyncio.to_thread(script)
    assert (receipt.order_id, receipt.amount_cents) == ("sync-script", 1250)

    # Inside this test's running loop: the call blocks this thread while its own loop does the work.
    client = SyncClient(HttpTransport(stack.api_url, token=ADMIN_TOKEN))
    try:
        executed = client.execute_workflow(
            Checkout.run, order("sync-in-loop"), id="sync-in-loop", result_timeout=RESULT_WITHIN
        )
        assert_type(executed, Receipt)
        assert executed.capture_id == "cap-sync-in-loop"
        shown = client.get_workflow("sync-script")
        assert shown.status == "completed"
        by_id = client.get_workflow_handle("sync-script", result_type=Receipt)
        assert by_id.result(timeout=30) == receipt
        # Errors come through as the async client raises them.
        again = client.start_workflow(Checkout.run, order("sync-script"), id="sync-script")
        with pytest.raises(WorkflowRejectedError, match="already exists"):
            again.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    finally:
        client.close()
    with pytest.raises(ClientClosed, match="closed"):
        client.get_workflow("sync-script")
    client.close()  # a second close is nothing
