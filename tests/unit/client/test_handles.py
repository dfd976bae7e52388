"""Workflow handles and typed starts without a network: what a class or a run method names, what is
refused before anything is sent, and how each way a workflow ends becomes the handle's result or
its error. The api is an `httpx.MockTransport` answering as the api does (its routes, its bodies)."""

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, assert_type

import httpx
import pytest
from pydantic import BaseModel

from slotflow import workflow
from slotflow.client import (
    Client,
    HttpTransport,
    InvalidRequest,
    NotFound,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowHandle,
    WorkflowOutcomeError,
    WorkflowRejectedError,
    WorkflowResultError,
    WorkflowResultTimeoutError,
    WorkflowTerminatedError,
)
from slotflow.client._handles import resolve_workflow
from slotflow.errors import SlotflowError


class Order(BaseModel):
    order_id: str
    amount_cents: int


class Receipt(BaseModel):
    order_id: str
    capture_id: str


@workflow.defn(name="test.checkout")
class Checkout:
    @workflow.run
    async def run(self, order: Order) -> Receipt:
        return Receipt(order_id=order.order_id, capture_id=f"cap-{order.order_id}")


@workflow.defn(name="test.nudge")
class Nudge:
    @workflow.run
    async def run(self) -> int:
        return 1


class Undecorated:
    @workflow.run
    async def run(self) -> None:
        return None


@workflow.defn(name="test.base")
class BaseFlow:
    @workflow.run
    async def run(self) -> int:
        return 1


@workflow.defn(name="test.derived")
class DerivedFlow(BaseFlow):
    """Inherits BaseFlow's run: that method is the body of two workflows."""


async def not_a_run(order: Order) -> None:
    return None


RECEIPT = {"order_id": "o-1", "capture_id": "cap-o-1"}


def shown(status: str, **fields: Any) -> dict[str, Any]:
    """A `GET /v1/workflows/{id}` body in ``status``."""
    return {"workflow_id": "o-1", "workflow_type": "test.checkout", "status": status, **fields}


class FakeApi:
    """The api's answers to the routes a handle uses: the start, its command's status, the
    workflow's reads (each read takes the next body; the last one repeats), and the commands to it.
    """

    def __init__(self, reads: list[dict[str, Any] | None], *, start_status: str = "accepted") -> None:
        self.reads = reads
        self.start_status = start_status
        self.requests: list[httpx.Request] = []

    def bodies(self) -> Iterator[tuple[str, str, Any]]:
        for request in self.requests:
            yield request.method, path_of(request), json.loads(request.content) if request.content else None

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = path_of(request)
        if request.method == "POST":
            return httpx.Response(202, json={"command_id": f"c-{len(self.requests)}"})
        if path.startswith("/v1/commands/"):
            command_id = path.rsplit("/", 1)[1]
            reason = "unknown workflow type 'test.checkout'" if self.start_status == "rejected" else None
            return httpx.Response(
                200, json={"command_id": command_id, "status": self.start_status, "reason": reason}
            )
        body = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if body is None:
            return httpx.Response(404, json={"detail": "workflow 'o-1' is not known (yet)"})
        return httpx.Response(200, json=body)

    def client(self) -> Client:
        return Client(HttpTransport("http://api", transport=httpx.MockTransport(self.handle)))

    def workflow_reads(self) -> int:
        return sum(1 for r in self.requests if r.method == "GET" and path_of(r).startswith("/v1/workflows/"))


def path_of(request: httpx.Request) -> str:
    """The request's path as sent (an id's escaped `/` kept escaped), without the query."""
    return request.url.raw_path.decode().split("?", 1)[0]


# -- what names a workflow --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "name"),
    [
        (Checkout.run, "test.checkout"),
        (Checkout, "test.checkout"),
        (Checkout().run, "test.checkout"),
        (Nudge.run, "test.nudge"),
        (DerivedFlow, "test.derived"),
        ("orders.checkout", "orders.checkout"),
    ],
    ids=["run-method", "class", "bound-run-method", "run-without-input", "subclass", "type-name"],
)
def test_a_class_or_its_run_method_names_the_type_its_decorator_registered(target: object, name: str) -> None:
    resolved, definition = resolve_workflow(target)
    assert resolved == name
    assert (definition is None) == isinstance(target, str)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (Undecorated, r"Undecorated is not a workflow: decorate it with @workflow\.defn"),
        (Undecorated.run, r"Undecorated\.run is marked @workflow\.run, but its class is not a workflow"),
        (not_a_run, r"not_a_run is not a workflow's run method: pass a @workflow\.defn class"),
        (42, r"42 is not a workflow: pass a @workflow\.defn class, its @workflow\.run method or"),
        (
            BaseFlow.run,
            r"BaseFlow\.run is the run method of several workflows \('test\.base', 'test\.derived'\)",
        ),
    ],
    ids=["undecorated-class", "undecorated-run", "plain-function", "not-callable", "inherited-run"],
)
async def test_what_is_not_a_workflow_is_refused_before_anything_is_sent(target: Any, says: str) -> None:
    api = FakeApi([shown("running")])
    with pytest.raises(InvalidRequest, match=says) as refused:
        await api.client().start_workflow(target, id="o-1")
    assert isinstance(refused.value, SlotflowError)
    assert api.requests == []


# -- the start ------------------------------------------------------------------------------------------


async def test_a_start_by_run_method_sends_its_type_and_input_and_types_the_handle() -> None:
    api = FakeApi([shown("completed", result=RECEIPT)])
    handle = await api.client().start_workflow(
        Checkout.run, Order(order_id="o-1", amount_cents=990), id="o-1"
    )
    assert_type(handle, WorkflowHandle[Receipt])
    assert (handle.workflow_id, handle.workflow_type) == ("o-1", "test.checkout")
    assert handle.sent is not None
    assert handle.sent.command_id == "c-1"
    assert next(api.bodies()) == (
        "POST",
        "/v1/workflows",
        {
            "workflow_id": "o-1",
            "workflow_type": "test.checkout",
            "input": {"order_id": "o-1", "amount_cents": 990},
            "id_reuse_policy": "reject_duplicate",
        },
    )
    receipt = await handle.result(poll_interval=0.01)
    assert_type(receipt, Receipt)
    assert receipt == Receipt(order_id="o-1", capture_id="cap-o-1")


@pytest.mark.parametrize(
    ("start", "says"),
    [
        (
            lambda c: c.start_workflow(Checkout.run, {"order_id": "o-1"}, id="o-1"),
            r"the input of workflow test\.checkout does not fit the parameter of Checkout\.run: amount_cents: Field required",
        ),
        (
            lambda c: c.start_workflow("test.checkout", [1, 2], id="o-1"),
            r"the input of workflow test\.checkout must be a JSON object .* not list",
        ),
        (
            lambda c: c.start_workflow(Nudge, {"n": 1}, id="o-1"),
            r"Nudge\.run takes no input, but the input of workflow test\.nudge was given",
        ),
        (
            lambda c: c.start_workflow("test.checkout", {"at": object()}, id="o-1"),
            r"the input of workflow test\.checkout cannot be serialised to JSON",
        ),
    ],
    ids=["does-not-fit-the-parameter", "not-an-object", "run-takes-none", "not-serialisable"],
)
async def test_an_input_the_run_cannot_take_is_refused_before_sending(
    start: Callable[[Client], Any], says: str
) -> None:
    api = FakeApi([shown("running")])
    with pytest.raises(InvalidRequest, match=says):
        await start(api.client())
    assert api.requests == []


async def test_execute_workflow_starts_then_returns_the_typed_result() -> None:
    api = FakeApi([shown("completed", result=RECEIPT)])
    receipt = await api.client().execute_workflow(
        Checkout.run, Order(order_id="o-1", amount_cents=990), id="o-1", result_timeout=10
    )
    assert_type(receipt, Receipt)
    assert receipt.capture_id == "cap-o-1"
    # The start, the wait for the orchestrator's answer to it, then the read.
    assert [(m, p) for m, p, _ in api.bodies()] == [
        ("POST", "/v1/workflows"),
        ("GET", "/v1/commands/c-1"),
        ("GET", "/v1/workflows/o-1"),
    ]


async def test_a_started_handle_waits_out_a_workflow_the_api_does_not_show_yet() -> None:
    api = FakeApi([None, shown("requested"), shown("running"), shown("completed", result=RECEIPT)])
    handle = await api.client().start_workflow("test.checkout", {"order_id": "o-1"}, id="o-1", wait=5)
    assert handle.sent is not None
    assert handle.sent.outcome is not None
    assert await handle.result(poll_interval=0.01) == RECEIPT
    assert api.workflow_reads() == 4


# -- how a workflow's end becomes the result or an error ----------------------------------------------


@pytest.mark.parametrize(
    ("body", "error", "attributes"),
    [
        (
            shown("failed", error={"type": "CaptureDeclined", "message": "card declined"}, compensated=True),
            WorkflowFailedError,
            {"failure_type": "CaptureDeclined", "failure_message": "card declined", "compensated": True},
        ),
        (
            shown("failed", error={"type": "WorkflowTimedOut", "message": "ran past 1:00:00"}),
            WorkflowFailedError,
            {"failure_type": "WorkflowTimedOut", "compensated": None},
        ),
        (
            shown("cancelled", cancel_reason="customer asked", compensated=True),
            WorkflowCancelledError,
            {"reason": "customer asked", "compensated": True},
        ),
        (
            shown("terminated", error={"type": "WorkflowTerminated", "message": "bad deploy"}),
            WorkflowTerminatedError,
            {"reason": "bad deploy"},
        ),
        (
            shown("rejected", rejection="unknown workflow type 'test.checkout'"),
            WorkflowRejectedError,
            {"reason": "unknown workflow type 'test.checkout'"},
        ),
    ],
    ids=["failed", "execution-timeout", "cancelled", "terminated", "start-refused"],
)
async def test_each_end_without_a_result_is_its_own_error(
    body: dict[str, Any], error: type[WorkflowOutcomeError], attributes: dict[str, Any]
) -> None:
    api = FakeApi([shown("running"), body])
    handle = api.client().get_workflow_handle("o-1")
    with pytest.raises(error) as ended:
        await handle.result(poll_interval=0.01)
    assert isinstance(ended.value, WorkflowOutcomeError)
    assert isinstance(ended.value, SlotflowError)
    assert ended.value.workflow_id == "o-1"
    assert {name: getattr(ended.value, name) for name in attributes} == attributes
    assert "o-1" in str(ended.value)
    assert api.workflow_reads() == 2


async def test_a_completed_result_is_validated_into_the_result_type() -> None:
    api = FakeApi([shown("completed", result=RECEIPT)])
    handle = api.client().get_workflow_handle("o-1", result_type=Receipt)
    assert_type(handle, WorkflowHandle[Receipt])
    assert await handle.result() == Receipt(**RECEIPT)
    # Without a type the result is the JSON as the api shows it.
    assert await api.client().get_workflow_handle("o-1").result() == RECEIPT


@pytest.mark.parametrize(
    ("result", "says"),
    [
        ({"order_id": "o-1"}, r"does not fit Receipt: capture_id: Field required"),
        (
            {"$slotflow_payload": "sha256:" + "ab" * 32, "bytes": 70_000},
            r"its result \(70000 bytes\) is stored by reference",
        ),
    ],
    ids=["does-not-fit", "stored-by-reference"],
)
async def test_a_result_that_cannot_be_given_as_asked_is_a_result_error(result: Any, says: str) -> None:
    api = FakeApi([shown("completed", result=result)])
    with pytest.raises(WorkflowResultError, match=says):
        await api.client().get_workflow_handle("o-1", result_type=Receipt).result()


async def test_a_wait_that_runs_out_names_the_last_status_and_the_workflow_runs_on() -> None:
    api = FakeApi([shown("running"), shown("stuck")])
    with pytest.raises(WorkflowResultTimeoutError, match=r"workflow o-1 is still stuck after 0\.1 s") as late:
        await api.client().get_workflow_handle("o-1").result(timeout=0.1, poll_interval=0.01)
    assert late.value.last_status == "stuck"
    assert api.workflow_reads() >= 2
    assert all(r.method == "GET" for r in api.requests)  # waiting sends nothing


async def test_a_refused_start_raises_from_result_instead_of_reading_another_run() -> None:
    api = FakeApi([shown("completed", result=RECEIPT)], start_status="rejected")
    handle = await api.client().start_workflow(
        Checkout.run, Order(order_id="o-1", amount_cents=990), id="o-1"
    )
    with pytest.raises(WorkflowRejectedError, match="unknown workflow type") as refused:
        await handle.result(timeout=5)
    assert refused.value.reason == "unknown workflow type 'test.checkout'"
    # The completed workflow the api shows under that id is never read as this start's result.
    assert api.workflow_reads() == 0


async def test_a_started_handle_reads_the_run_its_start_began_and_a_handle_by_id_the_newest() -> None:
    # The api answers 404 while it shows no run of that start (the previous run of a reused id,
    # say), then that run: the handle waits through the 404 and reads only its own run.
    api = FakeApi([None, shown("completed", result=RECEIPT)])
    handle = await api.client().start_workflow(
        Checkout.run, Order(order_id="o-1", amount_cents=990), id="o-1"
    )
    assert handle.sent is not None
    assert handle.start_command_id == handle.sent.command_id
    assert await handle.result(timeout=5, poll_interval=0.01) == Receipt(**RECEIPT)
    await handle.describe()
    reads = [r for r in api.requests if r.method == "GET" and path_of(r) == "/v1/workflows/o-1"]
    assert len(reads) == 3
    assert {r.url.params.get("start_command_id") for r in reads} == {handle.sent.command_id}

    by_id = FakeApi([shown("completed", result=RECEIPT)])
    await by_id.client().get_workflow_handle("o-1").result(timeout=5)
    assert [r.url.params.get("start_command_id") for r in by_id.requests] == [None]
    chosen = FakeApi([shown("completed", result=RECEIPT)])
    await chosen.client().get_workflow_handle("o-1", start_command_id="c-7").result(timeout=5)
    assert [r.url.params.get("start_command_id") for r in chosen.requests] == ["c-7"]


async def test_a_handle_by_id_to_a_workflow_the_api_does_not_know_raises_not_found() -> None:
    api = FakeApi([None])
    with pytest.raises(NotFound):
        await api.client().get_workflow_handle("o-1").result(timeout=5)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"timeout": -1.0}, "timeout must be zero or more seconds"),
        ({"poll_interval": 0.0}, "poll_interval must be more than zero seconds"),
    ],
)
async def test_a_bad_timeout_or_poll_interval_is_refused(arguments: dict[str, float], says: str) -> None:
    api = FakeApi([shown("running")])
    with pytest.raises(InvalidRequest, match=says):
        await api.client().get_workflow_handle("o-1").result(**arguments)
    assert api.requests == []


# -- commands through the handle ------------------------------------------------------------------------


async def test_signal_cancel_and_terminate_reach_the_workflows_routes() -> None:
    api = FakeApi([shown("running")])
    handle = api.client().get_workflow_handle("o/1")
    await handle.signal("repriced", Order(order_id="o-1", amount_cents=1))
    await handle.cancel("customer asked")
    await handle.terminate("bad deploy")
    assert (await handle.describe()).status == "running"
    assert list(api.bodies())[:3] == [
        (
            "POST",
            "/v1/workflows/o%2F1/signal",
            {"signal": "repriced", "payload": {"order_id": "o-1", "amount_cents": 1}},
        ),
        ("POST", "/v1/workflows/o%2F1/cancel", {"reason": "customer asked"}),
        ("POST", "/v1/workflows/o%2F1/terminate", {"reason": "bad deploy"}),
    ]
    with pytest.raises(InvalidRequest, match=r"the payload of signal 'repriced' must be a JSON object"):
        await handle.signal("repriced", 5)


# -- memo and search attributes ------------------------------------------------------------------


async def test_a_start_sends_memo_and_typed_search_attributes_and_describe_reads_them_back() -> None:
    due = datetime(2026, 12, 24, 18, tzinfo=UTC)
    api = FakeApi(
        [
            shown(
                "running",
                memo={"note": "gift"},
                search_attributes={
                    "Customer": {"type": "keyword", "value": "acme"},
                    "Due": {"type": "datetime", "value": "2026-12-24T18:00:00Z"},
                },
            )
        ]
    )
    async with api.client() as client:
        handle = await client.start_workflow(
            "test.checkout",
            {},
            id="o-1",
            memo={"note": "gift"},
            search_attributes={"Customer": "acme", "Due": due},
        )
        shown_now = await handle.describe()
    (_, _, body), *_ = api.bodies()
    assert body["memo"] == {"note": "gift"}
    assert body["search_attributes"] == {
        "Customer": {"type": "keyword", "value": "acme"},
        "Due": {"type": "datetime", "value": "2026-12-24T18:00:00Z"},
    }
    assert shown_now.memo == {"note": "gift"}
    assert shown_now.search_attributes == {"Customer": "acme", "Due": due}


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ({"ExecutionStatus": "x"}, "built-in field"),
        ({"Tags": [1, 2]}, "no search attribute type"),
        ({"Due": datetime(2026, 1, 1)}, "timezone-aware"),  # noqa: DTZ001 - the naive instant refused
    ],
)
async def test_bad_search_attributes_are_refused_before_anything_is_sent(
    attributes: dict[str, Any], says: str
) -> None:
    api = FakeApi([shown("running")])
    async with api.client() as client:
        with pytest.raises(InvalidRequest, match=says):
            await client.start_workflow("test.checkout", {}, id="o-1", search_attributes=attributes)
    assert api.requests == []


async def test_list_workflows_passes_the_query() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "bad" in request.url.params["query"]:
            return httpx.Response(400, json={"detail": "query: at 1: expected a field name, found 'bad'"})
        return httpx.Response(200, json={"items": [shown("running")], "next_cursor": None})

    async with Client(HttpTransport("http://api", transport=httpx.MockTransport(answer))) as client:
        page = await client.list_workflows(query="Customer = 'acme'")
        with pytest.raises(InvalidRequest, match="at 1: expected a field name"):
            await client.list_workflows(query="bad query")
    assert seen[0].url.params["query"] == "Customer = 'acme'"
    assert [w.workflow_id for w in page.items] == ["o-1"]
