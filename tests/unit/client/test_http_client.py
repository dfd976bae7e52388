"""The HTTP transport without a network: each command's request is one the api's own body models
accept, and each error status becomes its exception class."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from slotflow.client import (
    ApiError,
    Client,
    CommandRejected,
    Conflict,
    Forbidden,
    HttpTransport,
    InvalidRequest,
    NotAuthorized,
    NotFound,
    Unavailable,
    WaitTimedOut,
)
from slotflow.client._http import http_request
from slotflow.contracts import (
    Backfill,
    CancelWorkflow,
    CreateSchedule,
    DeadLetterFilter,
    DeleteSchedule,
    DiscardDeadLetters,
    Message,
    PauseSchedule,
    RedriveDeadLetters,
    ResumeSchedule,
    RetryActivity,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.search import typed_search_attributes
from slotflow_api.schemas import (
    BackfillBody,
    CancelBody,
    CreateScheduleBody,
    DiscardBody,
    PauseBody,
    RedriveBody,
    SignalBody,
    StartWorkflowBody,
    UpdateScheduleBody,
)

DEFINITION = ScheduleDefinition.model_validate(
    {
        "spec": {"kind": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
        "handler": "payouts.pay",
    }
)
AT = datetime(2030, 3, 2, 5, tzinfo=UTC)
CASES: list[tuple[Message, str, str, type[BaseModel] | None]] = [
    (CreateSchedule(schedule_id="p", definition=DEFINITION), "POST", "/v1/schedules", CreateScheduleBody),
    (UpdateSchedule(schedule_id="p", definition=DEFINITION), "PUT", "/v1/schedules/p", UpdateScheduleBody),
    (UpdateSchedule(schedule_id="p", patch={"tags": ["x"]}), "PATCH", "/v1/schedules/p", None),
    (PauseSchedule(schedule_id="p", reason="r", resume_at=AT), "POST", "/v1/schedules/p/pause", PauseBody),
    (ResumeSchedule(schedule_id="p"), "POST", "/v1/schedules/p/resume", None),
    (TriggerNow(schedule_id="a:b@c"), "POST", "/v1/schedules/a%3Ab%40c/trigger", None),
    (
        Backfill(schedule_id="p", start=AT, end=AT + timedelta(days=1)),
        "POST",
        "/v1/schedules/p/backfill",
        BackfillBody,
    ),
    (DeleteSchedule(schedule_id="p"), "DELETE", "/v1/schedules/p", None),
    (
        StartWorkflow(
            workflow_id="o-1", workflow_type="orders.checkout", execution_timeout=timedelta(hours=1)
        ),
        "POST",
        "/v1/workflows",
        StartWorkflowBody,
    ),
    (
        SignalWorkflow(workflow_id="o-1", signal="ok", payload={"a": 1}),
        "POST",
        "/v1/workflows/o-1/signal",
        SignalBody,
    ),
    (CancelWorkflow(workflow_id="o-1", reason="r"), "POST", "/v1/workflows/o-1/cancel", CancelBody),
    (TerminateWorkflow(workflow_id="o-1", reason="r"), "POST", "/v1/workflows/o-1/terminate", CancelBody),
    (
        RetryActivity(workflow_id="o/1", sequence=5, reason="carrier back"),
        "POST",
        "/v1/workflows/o%2F1/activities/5/retry",
        CancelBody,
    ),
    (
        RedriveDeadLetters(selection=DeadLetterFilter(job_id="p"), definition="current"),
        "POST",
        "/v1/dlq/redrive",
        RedriveBody,
    ),
    (
        RedriveDeadLetters(selection=DeadLetterFilter(job_id="p")),
        "POST",
        "/v1/dlq/redrive",
        RedriveBody,
    ),
    (
        DiscardDeadLetters(selection=DeadLetterFilter(ids=("t:1:2",)), reason="bad"),
        "POST",
        "/v1/dlq/discard",
        DiscardBody,
    ),
]


@pytest.mark.parametrize(
    ("message", "method", "path", "body_model"), CASES, ids=lambda c: getattr(c, "message_type", None)
)
def test_each_command_is_a_request_the_api_accepts(
    message: Message, method: str, path: str, body_model: type[BaseModel] | None
) -> None:
    got_method, got_path, body = http_request(message)
    assert (got_method, got_path) == (method, path)
    if body_model is not None:
        # The api's bodies forbid unknown fields: a field the client invents fails here.
        body_model.model_validate(body)
    if isinstance(message, StartWorkflow):
        assert body is not None
        assert body["execution_timeout_seconds"] == 3600


def test_a_start_carries_its_memo_and_typed_search_attributes_to_the_api() -> None:
    start = StartWorkflow(
        workflow_id="o-1",
        workflow_type="orders.checkout",
        memo={"note": "gift"},
        search_attributes=typed_search_attributes({"Customer": "acme", "Due": AT, "Vip": True}),
    )
    _, _, body = http_request(start)
    assert body is not None
    assert body["memo"] == {"note": "gift"}
    assert body["search_attributes"] == {
        "Customer": {"type": "keyword", "value": "acme"},
        "Due": {"type": "datetime", "value": "2030-03-02T05:00:00Z"},
        "Vip": {"type": "bool", "value": True},
    }
    StartWorkflowBody.model_validate(body)
    # Without them the body is what it was before they existed.
    _, _, plain = http_request(StartWorkflow(workflow_id="o-1", workflow_type="orders.checkout"))
    assert plain is not None
    assert "memo" not in plain
    assert "search_attributes" not in plain


def test_a_patch_is_sent_as_the_merge_patch_itself() -> None:
    assert http_request(UpdateSchedule(schedule_id="p", patch={"tags": ["x"]}))[2] == {"tags": ["x"]}


def test_all_keeps_what_the_selection_says_of_every_letter() -> None:
    # `all` narrows nothing, but a status (or a time range) still says which letters it means.
    _, _, body = http_request(RedriveDeadLetters(selection=DeadLetterFilter()), select_all=True)
    assert body == {"selection": {"ids": []}, "all": True, "limit": 1000, "definition": "as_run"}
    RedriveBody.model_validate(body)
    failed = RedriveDeadLetters(selection=DeadLetterFilter(status="redrive_failed"), all=True)
    _, _, body = http_request(failed)
    assert body is not None
    assert (body["all"], body["selection"]["status"]) == (True, "redrive_failed")
    assert RedriveBody.model_validate(body).selection.status == "redrive_failed"


def answering(status: int, body: Any, seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"detail": "no token"}, NotAuthorized),
        (403, {"detail": "needs operate, holds read"}, Forbidden),
        (404, {"detail": "schedule 'p' is not known (yet)"}, NotFound),
        (409, {"detail": "one live token per name"}, Conflict),
        (
            409,
            {"detail": "exists", "status": "rejected", "command_id": "c1", "reason": "exists"},
            CommandRejected,
        ),
        (422, {"detail": [{"loc": ["body", "reason"], "msg": "too long"}]}, InvalidRequest),
        (503, {"detail": "Kafka did not acknowledge"}, Unavailable),
        (418, {"detail": "teapot"}, ApiError),
    ],
)
async def test_each_error_status_has_its_class(status: int, body: Any, error: type[Exception]) -> None:
    async with HttpTransport("http://api", token="t", transport=answering(status, body)) as api:
        with pytest.raises(error) as raised:
            await Client(api).trigger_schedule("p")
    assert getattr(raised.value, "status", None) == status
    if status == 422:
        assert "reason: too long" in str(raised.value)


async def test_token_command_id_and_csrf_header_are_sent() -> None:
    seen: list[httpx.Request] = []
    transport = answering(202, {"command_id": "k-1"}, seen)
    async with HttpTransport("http://api", token="sft_x", transport=transport) as api:
        sent = await Client(api).pause_schedule("p", reason="r", command_id="k-1")
    assert sent.command_id == "k-1"
    request = seen[0]
    assert request.headers["Authorization"] == "Bearer sft_x"
    assert request.headers["Idempotency-Key"] == "k-1"
    assert request.headers["X-Slotflow-Client"] == "client"
    assert json.loads(request.content) == {"reason": "r"}


async def test_a_wait_that_ends_pending_raises_wait_timed_out() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json={"command_id": "c-2"})
        return httpx.Response(202, json={"command_id": "c-2", "status": "pending"})

    async with HttpTransport("http://api", transport=httpx.MockTransport(handle)) as api:
        with pytest.raises(WaitTimedOut, match="still pending"):
            await Client(api).resume_schedule("p", wait=0.3)


async def test_a_bad_command_id_is_refused_before_sending() -> None:
    async with HttpTransport("http://api", transport=answering(500, {})) as api:
        with pytest.raises(InvalidRequest, match="command id"):
            await Client(api).trigger_schedule("p", command_id="bad\nid")
        with pytest.raises(InvalidRequest, match="schedule_id"):
            await Client(api).trigger_schedule("not an id")
