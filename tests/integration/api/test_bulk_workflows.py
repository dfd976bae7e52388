"""Bulk cancel and terminate of workflows over HTTP (POST /v1/workflows/cancel and /terminate): the
dry run counts what it would touch and says what it leaves out and why (closed workflows, ones
compensating already for a cancel, ids the api does not know), the real call publishes exactly one
command per workflow taken, and a selection that does not narrow is refused unless it says `all`."""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import (
    REGISTRY,
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelWorkflow,
    CompensationRegistered,
    HistoryEvent,
    TerminateWorkflow,
    WorkflowCompleted,
    WorkflowStarted,
    history_event_id,
)
from slotflow.contracts.topics import WORKFLOW_COMMANDS, WORKFLOW_HISTORY
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
RUNNING = ("order-1041", "order-1042")
CLOSED = "order-1040"
COMPENSATING = "order-1043"
OTHER_TYPE = "invoice-77"


def _started(workflow_id: str, workflow_type: str) -> WorkflowStarted:
    return WorkflowStarted(
        workflow_id=workflow_id, sequence=1, workflow_type=workflow_type, command_id=f"start-{workflow_id}"
    )


def _compensating(workflow_id: str) -> list[HistoryEvent]:
    """A saga whose second step failed for good: its first step's compensation runs."""
    return [
        _started(workflow_id, "order_saga"),
        ActivityScheduled(
            workflow_id=workflow_id, sequence=2, activity="payments.charge", run_id=f"{workflow_id}/2"
        ),
        ActivityCompleted(workflow_id=workflow_id, sequence=3, scheduled_sequence=2, result={}),
        CompensationRegistered(workflow_id=workflow_id, sequence=4, for_step=2, activity="payments.refund"),
        ActivityScheduled(
            workflow_id=workflow_id, sequence=5, activity="shipping.book", run_id=f"{workflow_id}/5"
        ),
        ActivityFailed(
            workflow_id=workflow_id,
            sequence=6,
            scheduled_sequence=5,
            error_type="NoCarrier",
            message="no carrier",
            permanent=True,
        ),
        ActivityScheduled(
            workflow_id=workflow_id,
            sequence=7,
            activity="payments.refund",
            run_id=f"{workflow_id}/7",
            compensation=True,
            compensates=2,
        ),
    ]


async def _seed(client: httpx.AsyncClient, emit: Emitter) -> None:
    """Two running order sagas, one completed, one compensating, and a running invoice workflow."""
    histories: dict[str, list[HistoryEvent]] = {
        **{w: [_started(w, "order_saga")] for w in RUNNING},
        CLOSED: [
            _started(CLOSED, "order_saga"),
            WorkflowCompleted(workflow_id=CLOSED, sequence=2, result={}),
        ],
        COMPENSATING: _compensating(COMPENSATING),
        OTHER_TYPE: [_started(OTHER_TYPE, "invoice")],
    }
    for workflow_id, events in histories.items():
        for event in events:
            await emit(
                WORKFLOW_HISTORY,
                event,
                id=history_event_id(workflow_id, event.sequence),
                key=workflow_id,
                occurred_at=T0 + timedelta(seconds=event.sequence),
                source="orchestrator",
            )
    expected = dict.fromkeys((*RUNNING, OTHER_TYPE), "running") | {
        CLOSED: "completed",
        COMPENSATING: "compensating",
    }
    await eventually_json(
        client,
        "/v1/workflows?limit=50",
        lambda b: {w["workflow_id"]: w["status"] for w in b["items"]} == expected,
    )


async def test_a_dry_run_says_what_a_bulk_cancel_or_terminate_takes_and_leaves_out_and_why(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    await _seed(client, emit)
    cancel = await client.post(
        "/v1/workflows/cancel", json={"type": "order_saga", "reason": "carrier outage", "dry_run": True}
    )
    assert cancel.status_code == 200, cancel.text
    body = cancel.json()
    assert (body["action"], body["dry_run"], body["count"], body["more"]) == ("cancel", True, 2, 0)
    assert sorted(w["workflow_id"] for w in body["workflows"]) == sorted(RUNNING)
    assert all(w["command_id"] is None for w in body["workflows"])
    assert body["compensating"] == 1
    assert body["left_out_count"] == 2
    reasons = body["left_out"]
    assert reasons == {
        "closed (completed): a workflow that ended takes no cancel": 1,
        "compensating already: its compensations run; cancel one alone if meant": 1,
    }

    # Which ones, each with its reason (the compensating saga named).
    named_out = {w["workflow_id"]: (w["status"], w["reason"]) for w in body["left_out_workflows"]}
    assert named_out == {
        CLOSED: ("completed", "closed (completed): a workflow that ended takes no cancel"),
        COMPENSATING: (
            "compensating",
            "compensating already: its compensations run; cancel one alone if meant",
        ),
    }

    # A terminate takes the compensating saga too (its compensations left unfinished, counted).
    terminate = await client.post(
        "/v1/workflows/terminate", json={"type": "order_saga", "reason": "bad deploy", "dry_run": True}
    )
    assert terminate.status_code == 200, terminate.text
    body = terminate.json()
    assert (body["count"], body["compensating"], body["left_out_count"]) == (3, 1, 1)
    assert sorted(w["workflow_id"] for w in body["workflows"]) == sorted((*RUNNING, COMPENSATING))

    # Named ids: the unknown one is left out and said so; `limit` caps what it takes, `more` the rest.
    named = await client.post(
        "/v1/workflows/cancel",
        json={"workflow_ids": [*RUNNING, "order-9999"], "reason": "x", "dry_run": True, "limit": 1},
    )
    assert named.status_code == 200, named.text
    body = named.json()
    assert (body["count"], body["more"]) == (1, 1)
    assert body["left_out"] == {"not known to the api (yet)": 1}


async def test_a_bulk_cancel_publishes_one_command_per_workflow_it_takes_and_nothing_else(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    await _seed(client, emit)
    async with TopicTail(kafka, (WORKFLOW_COMMANDS,)) as commands:
        real = await client.post(
            "/v1/workflows/cancel",
            json={"type": "order_saga", "status": "running", "reason": "carrier outage"},
            headers={"Idempotency-Key": "bulk-cancel-1"},
        )
        assert real.status_code == 202, real.text
        body = real.json()
        assert (body["dry_run"], body["count"]) == (False, 2)
        answered = {w["workflow_id"]: w["command_id"] for w in body["workflows"]}
        assert set(answered) == set(RUNNING)
        assert answered[RUNNING[0]] == f"bulk-cancel-1:{RUNNING[0]}"

        terminated = await client.post(
            "/v1/workflows/terminate", json={"workflow_ids": [COMPENSATING, CLOSED], "reason": "bad deploy"}
        )
        assert terminated.status_code == 202, terminated.text
        assert terminated.json()["count"] == 1

        def published() -> list[Any]:
            return [REGISTRY.parse(e) for e in commands.seen_envelopes()]

        await assert_eventually(lambda: len(published()) >= 3, timeout=30, message="three commands")
        cancels = [m for m in published() if isinstance(m, CancelWorkflow)]
        terminates = [m for m in published() if isinstance(m, TerminateWorkflow)]
        assert sorted(m.workflow_id for m in cancels) == sorted(RUNNING)
        assert {m.reason for m in cancels} == {"carrier outage"}
        assert [(m.workflow_id, m.reason) for m in terminates] == [(COMPENSATING, "bad deploy")]
        envelopes = {e.id for e in commands.seen_envelopes()}
        assert set(answered.values()) <= envelopes
        assert len(commands.seen_envelopes()) == 3


async def test_a_selection_that_does_not_narrow_or_takes_nothing_is_refused_with_the_reason(
    client: httpx.AsyncClient, emit: Emitter, kafka: KafkaSettings
) -> None:
    await _seed(client, emit)
    async with TopicTail(kafka, (WORKFLOW_COMMANDS,)) as commands:
        empty = await client.post("/v1/workflows/cancel", json={"reason": "oops"})
        assert empty.status_code == 422, empty.text
        assert '"all": true' in empty.json()["detail"]
        # A status alone is every such workflow: refused too, with how many it would take.
        running = await client.post("/v1/workflows/terminate", json={"status": "running", "reason": "oops"})
        assert running.status_code == 422, running.text
        assert "every running workflow (3 it can take now, of 3)" in running.json()["detail"]
        # Nothing open in the selection: a real call is refused with what was left out.
        closed = await client.post("/v1/workflows/cancel", json={"workflow_ids": [CLOSED], "reason": "late"})
        assert closed.status_code == 422, closed.text
        assert "closed (completed): a workflow that ended takes no cancel (1)" in closed.json()["detail"]
        no_reason = await client.post("/v1/workflows/cancel", json={"type": "order_saga", "reason": ""})
        assert no_reason.status_code == 422
        both = await client.post(
            "/v1/workflows/cancel", json={"type": "order_saga", "all": True, "reason": "x"}
        )
        assert both.status_code == 422
        # `all` says it: every running workflow, previewed.
        everything = await client.post(
            "/v1/workflows/cancel", json={"status": "running", "all": True, "reason": "x", "dry_run": True}
        )
        assert everything.status_code == 200, everything.text
        assert everything.json()["count"] == 3
        assert commands.seen_envelopes() == []
