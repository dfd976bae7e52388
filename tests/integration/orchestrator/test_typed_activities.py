"""Activities named by their handler function, end to end on the real broker and database: the
orchestrator (the workflow module imports the handlers' module) schedules them by their registered
name, the claimer validates the payload into the handler's input type, and the result comes back
into the workflow as the handler's return type. An argument that does not fit fails the workflow
where it is called, before anything is scheduled; a payload sent by name that does not fit fails
the activity at once, not retried."""

import pytest

from slotflow.contracts import ActivityFailed, ActivityScheduled, WorkflowCompleted, WorkflowFailed
from slotflow.runs import HandlerRegistry
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode, load_workflow_code
from tests.integration.orchestrator.support import Workflows
from tests.integration.orchestrator.typed import TYPED


@pytest.fixture
def registry() -> HandlerRegistry:
    """The claimer serves the typed handlers (overrides the saga's)."""
    return TYPED


@pytest.fixture
def workflow_code() -> RuntimeWorkflowCode:
    """The orchestrator serves the typed workflows (overrides the saga's)."""
    return load_workflow_code(["tests.integration.orchestrator.typed"])


async def test_a_typed_activity_runs_with_its_input_type_and_returns_its_result_type(
    workflows: Workflows,
) -> None:
    await workflows.start(
        "typed-1", "tests.typed_checkout", {"order_id": "typed-1", "amount_cents": 990}, "t-1"
    )
    history = await workflows.wait("typed-1", "workflow.completed")
    scheduled = [e for e in history if isinstance(e, ActivityScheduled)]
    assert [(e.activity, e.payload) for e in scheduled] == [
        ("tests.typed.charge", {"order_id": "typed-1", "amount_cents": 990})
    ]
    completed = history[-1]
    assert isinstance(completed, WorkflowCompleted)
    assert completed.result == {
        "charge_type": "Charge",
        "charge_id": f"ch-{scheduled[0].run_id}",
        "amount_cents": 990,
    }

    # By name, a payload that does not fit the handler's input: refused where it runs, once.
    await workflows.start(
        "typed-2",
        "tests.typed_checkout",
        {"order_id": "typed-2", "amount_cents": 5, "bad_payload_by_name": True},
        "t-2",
    )
    history = await workflows.wait("typed-2", "workflow.failed")
    failed = [e for e in history if isinstance(e, ActivityFailed)]
    assert len(failed) == 1
    assert (failed[0].error_type, failed[0].permanent) == ("HandlerInputError", True)
    assert "does not fit ChargeCard: amount_cents: Input should be a valid integer" in failed[0].message
    run = await workflows.db.fetchrow(
        "SELECT attempt, state FROM claimer.runs WHERE run_id = $1", f"typed-2/{failed[0].scheduled_sequence}"
    )
    assert run is not None
    assert (run["attempt"], run["state"]) == (1, "dead_lettered")


async def test_an_argument_that_does_not_fit_fails_the_workflow_before_anything_is_scheduled(
    workflows: Workflows,
) -> None:
    await workflows.start("typed-3", "tests.typed_wrong_argument", {"order_id": "typed-3"}, "t-3")
    history = await workflows.wait("typed-3", "workflow.failed")
    assert [e.message_type for e in history] == ["workflow.started", "workflow.failed"]
    end = history[-1]
    assert isinstance(end, WorkflowFailed)
    assert end.error_type == "ActivityInputError"
    assert "activity tests.typed.charge" in end.message
    assert "takes ChargeCard" in end.message
