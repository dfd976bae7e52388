"""Activities named by their handler function: the argument checked against the handler's declared
input where the workflow calls it, the result typed by its return annotation, names still taken,
and the payload validated into the input where the handler runs (offline, `WorkflowEnvironment`)."""

import pickle
from collections.abc import Callable
from typing import Any, assert_type

import pytest
from pydantic import BaseModel

from slotflow import workflow
from slotflow.contracts import ActivityFailed, ActivityScheduled
from slotflow.errors import ConfigurationError
from slotflow.runs import HandlerInputError, HandlerRegistry, RunContext, handler, handler_shape
from slotflow.testing import run_context
from slotflow.workflow import Saga
from slotflow.workflow.check import check_source
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError

ACTIVITIES = HandlerRegistry()
CALLS: list[tuple[str, Any]] = []


class ChargeCard(BaseModel):
    amount: int
    currency: str = "EUR"


class Charge(BaseModel):
    charge_id: str
    amount: int


@handler("test.typed.charge", registry=ACTIVITIES)
async def charge_card(ctx: RunContext, card: ChargeCard) -> Charge:
    CALLS.append(("charge", card))
    return Charge(charge_id=f"ch-{ctx.run_id}", amount=card.amount)


@handler("test.typed.refund", registry=ACTIVITIES)
async def refund(ctx: RunContext, charge: Charge) -> None:
    CALLS.append(("refund", charge))


@handler("test.typed.ship", registry=ACTIVITIES)
async def ship(ctx: RunContext) -> dict[str, str]:
    """A handler in the older style: the context alone, the payload read from it."""
    return {"shipped": str(ctx.payload["sku"])}


@handler("test.typed.declined", registry=ACTIVITIES)
async def declined_capture(ctx: RunContext, charge: Charge) -> Charge:
    raise ValueError("capture declined")


async def not_a_handler(ctx: RunContext, card: ChargeCard) -> Charge:
    return Charge(charge_id="never", amount=card.amount)


@workflow.defn(name="test.typed.checkout")
class TypedCheckout:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        async with Saga() as saga:
            charge = await workflow.execute_activity(charge_card, ChargeCard(amount=order["amount"]))
            assert_type(charge, Charge)
            saga.add_compensation(refund, charge)
            shipped = await workflow.execute_activity(ship, {"sku": order["sku"]})
            assert_type(shipped, dict[str, str])
            if order.get("decline"):
                await workflow.execute_activity(declined_capture, charge)
        # The name still works: the argument goes as given, the result is the JSON.
        by_name = await workflow.execute_activity("test.typed.charge", {"amount": 1})
        return {"charge": charge.model_dump(), "type": type(charge).__name__, "by_name": by_name, **shipped}


@workflow.defn(name="test.typed.wrong_argument")
class WrongArgument:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(charge_card, {"amount": "five euros"})


@workflow.defn(name="test.typed.not_a_handler")
class NotAHandler:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(not_a_handler, ChargeCard(amount=5))


@workflow.defn(name="test.typed.wrong_payload_by_name")
class WrongPayloadByName:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity("test.typed.charge", {"amount": "five euros"})


@pytest.fixture(autouse=True)
def _clear() -> None:
    CALLS.clear()


async def test_a_handler_function_is_called_with_its_typed_input_and_gives_its_typed_result() -> None:
    async with WorkflowEnvironment([TypedCheckout], activities=ACTIVITIES, replay_every_step=True) as env:
        result = await env.execute_workflow(TypedCheckout, {"amount": 5, "sku": "mug"}, id="typed-1")
    assert (result["charge"]["amount"], result["type"], result["shipped"]) == (5, "Charge", "mug")
    assert result["charge"]["charge_id"].startswith("ch-typed-1/")
    assert result["by_name"]["amount"] == 1  # the JSON, as the api would show it
    assert [
        ("charge", ChargeCard(amount=5)),
        ("charge", ChargeCard(amount=1)),
    ] == CALLS
    history = env.history("typed-1")
    scheduled = [e.activity for e in history if isinstance(e, ActivityScheduled)]
    assert scheduled == ["test.typed.charge", "test.typed.ship", "test.typed.charge"]


async def test_a_saga_undoes_with_a_typed_compensation() -> None:
    async with WorkflowEnvironment([TypedCheckout], activities=ACTIVITIES) as env:
        with pytest.raises(WorkflowFailureError) as failed:
            await env.execute_workflow(
                TypedCheckout, {"amount": 7, "sku": "mug", "decline": True}, id="typed-2"
            )
    assert (failed.value.error_type, failed.value.compensated) == ("ValueError", True)
    undo = CALLS[-1]
    assert undo[0] == "refund"
    assert isinstance(undo[1], Charge)
    assert undo[1].amount == 7


async def test_an_argument_that_does_not_fit_fails_where_it_is_called_naming_the_activity_and_type() -> None:
    async with WorkflowEnvironment([WrongArgument], activities=ACTIVITIES) as env:
        with pytest.raises(WorkflowFailureError) as failed:
            await env.execute_workflow(WrongArgument, None, id="typed-3")
        # Nothing was scheduled: the check is at the call, before the history records a step.
        assert [e.message_type for e in env.history("typed-3")] == ["workflow.started", "workflow.failed"]
    assert failed.value.error_type == "ActivityInputError"
    message = failed.value.error_message
    assert "activity test.typed.charge" in message
    assert "takes ChargeCard" in message
    assert "amount: Input should be a valid integer" in message
    assert CALLS == []


async def test_a_function_no_handler_registered_is_refused_saying_what_to_pass() -> None:
    async with WorkflowEnvironment([NotAHandler], activities=ACTIVITIES) as env:
        with pytest.raises(WorkflowFailureError) as failed:
            await env.execute_workflow(NotAHandler, None, id="typed-4")
    assert failed.value.error_type == "ActivityInputError"
    assert "not_a_handler is not a registered handler" in failed.value.error_message


async def test_a_payload_sent_by_name_that_does_not_fit_fails_the_run_permanently_where_it_runs() -> None:
    async with WorkflowEnvironment([WrongPayloadByName], activities=ACTIVITIES) as env:
        with pytest.raises(WorkflowFailureError) as failed:
            await env.execute_workflow(WrongPayloadByName, None, id="typed-5")
        failures = [e for e in env.history("typed-5") if isinstance(e, ActivityFailed)]
    assert failed.value.error_type == "HandlerInputError"
    # Not retried: the same payload fails the same way on every attempt.
    assert len(failures) == 1
    assert failures[0].permanent
    assert "does not fit ChargeCard" in failures[0].message


async def test_a_fake_in_a_mapping_that_takes_an_input_gets_it_validated() -> None:
    seen: list[ChargeCard] = []

    async def fake_charge(ctx: RunContext, card: ChargeCard) -> Charge:
        seen.append(card)
        return Charge(charge_id="fake", amount=card.amount)

    fakes: dict[str, Callable[..., Any]] = {
        "test.typed.charge": fake_charge,
        "test.typed.refund": refund,
        "test.typed.ship": ship,
        "test.typed.declined": declined_capture,
    }
    async with WorkflowEnvironment([TypedCheckout], activities=fakes) as env:
        result = await env.execute_workflow(TypedCheckout, {"amount": 3, "sku": "cup"}, id="typed-6")
    assert result["charge"] == {"charge_id": "fake", "amount": 3}
    assert seen == [ChargeCard(amount=3), ChargeCard(amount=1)]


def test_the_registry_reads_the_shape_and_calls_a_typed_handler_with_the_context_alone() -> None:
    shape = handler_shape(charge_card)
    assert shape is not None
    assert (shape.name, shape.input, shape.result) == ("test.typed.charge", ChargeCard, Charge)
    untyped = handler_shape(ship)
    assert untyped is not None
    assert untyped.input is None
    assert handler_shape(not_a_handler) is None
    registered = ACTIVITIES.resolve("test.typed.charge")
    assert registered.runs_in == "loop"
    # The function as written stays what the decorator returned; the claimer calls the wrapper.
    assert registered.source is charge_card
    assert registered.fn is not charge_card
    # Registering the same function again under its name is no conflict.
    ACTIVITIES.register("test.typed.charge", charge_card)
    # The wrapper pickles (a process pool sends it to its workers by reference).
    assert pickle.loads(pickle.dumps(registered.fn)).__wrapped__ is charge_card  # noqa: S301 (our own bytes)


def test_a_plain_def_handler_that_takes_an_input_validates_it_in_its_thread() -> None:
    registry = HandlerRegistry()

    def label(ctx: RunContext, card: ChargeCard) -> str:
        return f"{card.amount} {card.currency}"

    registry.register("test.typed.label", label)
    called = registry.resolve("test.typed.label")
    assert called.runs_in == "thread"
    assert called.fn(_context({"amount": "12"})) == "12 EUR"
    with pytest.raises(
        HandlerInputError, match=r"handler 'test.typed.label' does not fit ChargeCard: amount"
    ):
        called.fn(_context({"amount": "twelve"}))


def test_an_input_type_pydantic_cannot_validate_is_refused_at_registration() -> None:
    class Opaque:
        pass

    async def opaque(ctx: RunContext, value: Opaque) -> None:
        return None

    with pytest.raises(ConfigurationError, match="is not a type pydantic can validate"):
        HandlerRegistry().register("test.typed.opaque", opaque)


def test_the_static_check_lets_a_workflow_pass_a_handler_function_it_imports_or_defines() -> None:
    source = """
import httpx
from slotflow import workflow
from slotflow.runs import RunContext, handler
from payments.activities import charge_card


@handler("shipping.book")
async def book(ctx: RunContext, order: dict) -> dict:
    return (await httpx.AsyncClient().post("https://carrier", json=order)).json()


@workflow.defn(name="orders.checkout")
class Checkout:
    @workflow.run
    async def run(self, order: dict) -> None:
        await workflow.execute_activity(charge_card, order)
        await workflow.execute_activity(book, order)
"""
    assert check_source(source, "typed.py").findings == ()
    # Calling the handler itself in the workflow is I/O in workflow code, and still reported.
    called = source.replace("await workflow.execute_activity(book, order)", "await book(None, order)")
    findings = check_source(called, "typed.py").findings
    assert [(f.code, f.via) for f in findings] == [("SFW006", "helper book()")]


def _context(payload: dict[str, Any]) -> RunContext:
    return run_context(payload=payload)
