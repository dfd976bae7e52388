"""slotflow.client against the whole system running as processes on the real Kafka and PostgreSQL.

Both transports: HTTP through the api with a bearer token, and Kafka straight to the command topics
(its wait reading the acknowledgement events; its reads through the api). A schedule is created,
triggered and backfilled and its runs complete; the example order saga starts and completes; a
long-held order is signalled and cancelled; rejections come back with the owner's reason; the api
refuses a call without a token or with a wrong one, and a `read` token's command.
"""

from datetime import UTC, datetime
from typing import Any

import pytest

from slotflow.client import (
    Client,
    CommandRejected,
    Conflict,
    Forbidden,
    HttpTransport,
    InvalidRequest,
    KafkaTransport,
    NotAuthorized,
    NotFound,
    ReadsNeedHttp,
    Run,
    Sent,
)
from slotflow.testing import assert_eventually
from tests.integration.client.conftest import Stack

WAIT = 30.0
#: A yearly grid, so nothing fires by itself while the test runs: every run is a trigger or a backfill.
YEARLY = {"kind": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"}


def order(order_id: str, *, hold: str = "PT1S") -> dict[str, Any]:
    """An `orders.models.Order` as JSON (examples/orders), with a short hold unless told."""
    return {
        "order_id": order_id,
        "customer_id": "c-7",
        "amount_cents": 9990,
        "card_token": "tok_visa",
        "lines": [{"sku": "mug", "quantity": 2}],
        "hold": hold,
    }


def clients(http: HttpTransport, kafka: KafkaTransport) -> dict[str, Client]:
    return {"http": Client(http), "kafka": Client(kafka, reads=http)}


def accepted(sent: Sent | None) -> None:
    """``sent`` waited for, and its owner accepted it."""
    assert sent is not None
    assert sent.outcome is not None, sent
    assert sent.outcome.status == "accepted", sent


async def reaches(client: Client, workflow_id: str, status: str) -> None:
    """Wait until the api shows the workflow in ``status``."""

    async def there() -> bool:
        return (await client.get_workflow(workflow_id)).status == status

    await assert_eventually(there, timeout=90, interval=0.3, message=f"{workflow_id} {status}")


async def completed_run(client: Client, **filters: Any) -> Run:
    """The one run the filters select, once it completed."""
    found: list[Run] = []

    async def done() -> bool:
        page = await client.list_runs(**filters)
        found[:] = page.items
        return len(page.items) == 1 and page.items[0].state == "completed"

    await assert_eventually(
        done, timeout=60, interval=0.3, message=f"one completed run for {filters}: {found}"
    )
    return found[0]


async def test_schedules_over_both_transports(
    stack: Stack, http: HttpTransport, kafka_transport: KafkaTransport
) -> None:
    for name, client in clients(http, kafka_transport).items():
        sid = f"pay-{name}"
        created = await client.create_schedule(
            sid, {"spec": YEARLY, "handler": "payments.authorize", "payload": order(sid)}, wait=WAIT
        )
        accepted(created)
        assert created.command_type == "schedule.create"
        # Read-your-writes: once accepted, the read model already has the schedule.
        schedule = await client.get_schedule(sid)
        assert (schedule.schedule_id, schedule.handler, schedule.paused) == (sid, "payments.authorize", False)

        triggered = await client.trigger_schedule(sid, wait=WAIT)
        accepted(triggered)
        run = await completed_run(client, job_id=sid)
        detail = await client.get_run(run.run_id)
        assert (detail.state, detail.kind) == ("completed", "manual")
        assert detail.result["authorization_id"] == f"auth-{sid}"

        paused = await client.pause_schedule(sid, reason="bank maintenance", wait=WAIT)
        accepted(paused)
        assert (await client.get_schedule(sid)).paused is True
        await client.resume_schedule(sid, wait=WAIT)
        assert (await client.get_schedule(sid)).paused is False
        await client.update_schedule(sid, patch={"tags": ["money-moving"]}, wait=WAIT)
        assert (await client.get_schedule(sid)).model_dump()["tags"] == ["money-moving"]

        # The yearly slot of 2025-01-01 as a backfill: exactly one run, and it completes.
        start, end = datetime(2024, 12, 31, 23, tzinfo=UTC), datetime(2025, 1, 1, 1, tzinfo=UTC)
        await client.backfill_schedule(sid, start, end, wait=WAIT)
        backfilled = await completed_run(client, schedule_id=sid, start=start, end=end)
        assert backfilled.slot == datetime(2025, 1, 1, tzinfo=UTC)
        assert (await client.list_schedules(id_prefix=sid)).items[0].schedule_id == sid

        # The ticker refuses with its reason: the call raises, and `wait` returns it as rejected.
        with pytest.raises(CommandRejected, match="already exists") as refused:
            await client.create_schedule(sid, {"spec": YEARLY, "handler": "payments.authorize"}, wait=WAIT)
        assert refused.value.command_id.startswith("cmd-")
        assert "use UpdateSchedule" in refused.value.reason
        unknown = await client.trigger_schedule(f"no-such-{name}")
        status = await client.wait(unknown.command_id, timeout=WAIT)
        assert (status.status, status.reason) == ("rejected", f"schedule no-such-{name} does not exist")

    # Kafka alone: outcomes come from the ticker's acknowledgement events, no api involved.
    alone = Client(kafka_transport)
    accepted(await alone.trigger_schedule("pay-kafka", wait=WAIT))
    refused_alone = await alone.trigger_schedule("no-such-schedule")
    status = await alone.wait(refused_alone.command_id, timeout=WAIT)
    assert (status.status, status.reason) == ("rejected", "schedule no-such-schedule does not exist")
    # It holds no read model, and cannot tell where a command it did not publish is acknowledged.
    with pytest.raises(ReadsNeedHttp):
        await alone.get_schedule("pay-kafka")
    with pytest.raises(ReadsNeedHttp):
        await alone.wait("cmd-published-elsewhere", timeout=1)


async def test_workflows_over_both_transports(
    stack: Stack, http: HttpTransport, kafka_transport: KafkaTransport
) -> None:
    for name, client in clients(http, kafka_transport).items():
        # The example saga: authorize, reserve, hold (1 s here), capture.
        wid = f"order-{name}"
        started = await client.start_workflow("orders.checkout", order(wid), id=wid, wait=WAIT)
        accepted(started.sent)
        await reaches(client, wid, "completed")
        workflow = await client.get_workflow(wid)
        assert workflow.workflow_type == "orders.checkout"
        assert workflow.result["capture_id"] == f"cap-{wid}"

        # An order held for an hour: a signal reaches it; a cancel compensates and ends it.
        held = f"held-{name}"
        await client.start_workflow("orders.checkout", order(held, hold="PT1H"), id=held, wait=WAIT)
        signalled = await client.signal_workflow(held, "note", {"by": "ops"}, wait=WAIT)
        accepted(signalled)
        cancelled = await client.cancel_workflow(held, reason="customer asked", wait=WAIT)
        accepted(cancelled)
        await reaches(client, held, "cancelled")
        # The example's `async with Saga()` undid both steps, newest first.
        shown = (await client.get_workflow(held)).model_extra or {}
        assert shown["compensated"] is True, shown
        assert [(c["activity"], c["state"]) for c in shown["compensations"]] == [
            ("inventory.release", "done"),
            ("payments.void", "done"),
        ]
        listed = await client.list_workflows(workflow_type="orders.checkout", status="cancelled")
        assert held in [w.workflow_id for w in listed.items]

        # Rejections, each with its reason: over Kafka the orchestrator's; over HTTP the api answers
        # a signal to an ended workflow itself (409) and publishes nothing.
        if name == "http":
            with pytest.raises(Conflict) as closed:
                await client.signal_workflow(held, "note", wait=WAIT)
            assert held in str(closed.value), str(closed.value)
        else:
            with pytest.raises(CommandRejected) as late:
                await client.signal_workflow(held, "note", wait=WAIT)
            assert held in late.value.reason, late.value.reason
        with pytest.raises(CommandRejected, match=r"unknown workflow type 'orders\.nope'"):
            await client.start_workflow("orders.nope", id=f"nope-{name}", wait=WAIT)
        with pytest.raises(NotFound):
            await client.get_workflow(f"never-started-{name}")

    # Terminate (over the api): ends a running workflow at once, without compensating.
    client = Client(http)
    await client.start_workflow(
        "orders.checkout", order("order-ended", hold="PT1H"), id="order-ended", wait=WAIT
    )

    # Terminated once it holds: before its hold timer started there is no timer to cancel (the
    # terminate raced the two activities before the hold, and the timers read []).
    async def holding() -> bool:
        shown = (await client.get_workflow("order-ended")).model_extra or {}
        return bool(shown.get("pending_timers"))

    await assert_eventually(holding, timeout=90, interval=0.3, message="order-ended holds")
    await client.terminate_workflow("order-ended", reason="stuck on a bad deploy", wait=WAIT)
    await reaches(client, "order-ended", "terminated")
    ended = (await client.get_workflow("order-ended")).model_extra or {}
    assert ended["error"] == {"type": "WorkflowTerminated", "message": "stuck on a bad deploy"}
    assert [t["status"] for t in ended["timers"]] == ["cancelled"]  # the hold, cancelled with the run


async def test_http_needs_a_token_with_the_scope(stack: Stack, http: HttpTransport) -> None:
    async with (
        HttpTransport(stack.api_url) as anonymous,
        HttpTransport(stack.api_url, token="sft_wrong") as wrong,
    ):
        for transport in (anonymous, wrong):
            with pytest.raises(NotAuthorized, match="HTTP 401") as refused:
                await Client(transport).list_schedules()
            assert refused.value.status == 401
            with pytest.raises(NotAuthorized):
                await Client(transport).trigger_schedule("payouts")
    # A read token reads, and may not trigger (403 names the scope).
    created = await http.request("POST", "/v1/tokens", json={"name": "client-reader", "scope": "read"})
    async with HttpTransport(stack.api_url, token=created["secret"]) as reader:
        assert (await Client(reader).list_workflows()).items == []
        with pytest.raises(Forbidden, match="operate") as forbidden:
            await Client(reader).trigger_schedule("payouts")
        assert forbidden.value.status == 403
    # The admin token does: the command id is the Idempotency-Key given.
    sent = await Client(http).trigger_schedule("payouts", command_id="client-trigger-1")
    assert sent.command_id == "client-trigger-1"
    rejected = await http.status("client-trigger-1", wait=WAIT)
    assert (rejected.status, rejected.principal) == ("rejected", "bootstrap")


async def test_a_bulk_cancel_previews_then_cancels_each_held_order_once_and_its_saga_compensates(
    stack: Stack, http: HttpTransport
) -> None:
    """Over the api, against the real services: the dry run counts the held orders and leaves the
    completed one out; the real call cancels each held order, whose saga undoes both its steps; a
    second bulk cancel of the same ids takes nothing (all ended) and says why."""
    client = Client(http)
    held = ["bulk-held-1", "bulk-held-2"]
    for wid in held:
        accepted(
            (await client.start_workflow("orders.checkout", order(wid, hold="PT1H"), id=wid, wait=WAIT)).sent
        )
    accepted(
        (await client.start_workflow("orders.checkout", order("bulk-done"), id="bulk-done", wait=WAIT)).sent
    )
    await reaches(client, "bulk-done", "completed")
    for wid in held:
        await reaches(client, wid, "running")
    chosen = [*held, "bulk-done"]

    preview = await client.cancel_workflows(workflow_ids=chosen, reason="carrier outage", dry_run=True)
    assert (preview.dry_run, preview.count) == (True, 2)
    assert sorted(w.workflow_id for w in preview.workflows) == held
    assert preview.left_out == {"closed (completed): a workflow that ended takes no cancel": 1}

    sent = await client.cancel_workflows(workflow_ids=chosen, reason="carrier outage", command_id="outage-1")
    assert (sent.dry_run, sent.count) == (False, 2)
    assert sorted(w.command_id or "" for w in sent.workflows) == [f"outage-1:{wid}" for wid in held]
    for wid in held:
        await reaches(client, wid, "cancelled")
        shown = (await client.get_workflow(wid)).model_extra or {}
        assert [(c["activity"], c["state"]) for c in shown["compensations"]] == [
            ("inventory.release", "done"),
            ("payments.void", "done"),
        ]
    with pytest.raises(InvalidRequest, match="takes no workflow to cancel"):
        await client.cancel_workflows(workflow_ids=chosen, reason="again")
    with pytest.raises(InvalidRequest, match='"all": true'):
        await client.terminate_workflows(status="running", reason="everything")
