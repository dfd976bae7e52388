"""A child started without an id gets one every service accepts and every api route reaches."""

import re
from typing import Any

from slotflow import workflow
from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.contracts.workflows import ChildWorkflowScheduled, WorkflowFailed
from slotflow.workflow.children import default_child_id
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import History


def test_the_default_is_the_parent_id_and_the_sequence() -> None:
    assert default_child_id("orders/eu/1042", 2) == "orders/eu/1042/child/2"


def test_a_parent_id_too_long_for_it_is_cut_with_a_digest_and_stays_a_workflow_id() -> None:
    # Before: `{parent}/child/{sequence}`, past the 200 characters of a workflow id, which the
    # contract refuses: a parent with an id of 194 characters or more failed (ValidationError) at
    # the start of a child it gave no id.
    long_a = "a" * 190 + "x" * 10
    long_b = "a" * 190 + "y" * 10
    for parent in (long_a, long_b, "p" * 193):
        child = default_child_id(parent, 123_456)
        assert re.fullmatch(IDENTIFIER_PATTERN, child), child
        assert child.endswith("/child/123456")
        assert default_child_id(parent, 123_456) == child  # the same on every replay
    assert default_child_id(long_a, 7) != default_child_id(long_b, 7)


@workflow.defn(name="tests.default_child_parent")
class DefaultChildParent:
    @workflow.run
    async def run(self) -> Any:
        return await workflow.execute_child_workflow("tests.some_child")


def test_a_long_parent_starts_its_child_with_the_default_id() -> None:
    parent = "p" * 200
    history = History(WorkflowRuntime([DefaultChildParent]), "tests.default_child_parent", workflow_id=parent)
    decision = history.replay()
    (scheduled,) = [e for e in decision.events if isinstance(e, ChildWorkflowScheduled)]
    assert scheduled.child_workflow_id == default_child_id(parent, 2)
    assert not [e for e in decision.events if isinstance(e, WorkflowFailed)]
