"""Durable workflows: ordinary async Python that survives crashes by replaying its history.

One import gives everything workflow code needs::

    from datetime import timedelta
    from slotflow import workflow

    @workflow.defn(name="orders.checkout")
    class Checkout:
        @workflow.run
        async def run(self, order: Order) -> Receipt:
            auth = await workflow.execute_activity("payments.authorize", order)
            await workflow.sleep(timedelta(hours=24))  # a durable timer, never asyncio.sleep
            return await workflow.execute_activity("payments.capture", auth, result_type=Receipt)

Activities are the `@handler` functions of `slotflow.runs`; the workflow body only decides, and
anything that touches the world is an activity or a recorded primitive (each function's docstring
has an example). The guide and the whole reference (timers, signals, sagas, versioning,
continue-as-new, children, testing, replay): docs/workflows.md.
"""

from asyncio import CancelledError

from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.search import SearchAttribute
from slotflow.contracts.workflows import ParentClosePolicy
from slotflow.workflow._api import (
    WorkflowInfo,
    continue_as_new,
    create_task,
    deprecate_patch,
    execute_activity,
    gather,
    info,
    memo,
    now,
    patched,
    random,
    sleep,
    upsert_memo,
    upsert_search_attributes,
    uuid4,
    wait_condition,
    wait_signal,
)
from slotflow.workflow._saga import Compensation, Saga
from slotflow.workflow.children import ChildWorkflowHandle, execute_child_workflow, start_child_workflow
from slotflow.workflow.definition import defn, query, run, signal
from slotflow.workflow.errors import (
    ActivityError,
    ActivityInputError,
    ActivityTimeoutError,
    ChildWorkflowError,
    HistoryLimitExceeded,
    InvalidHistory,
    NonDeterminismError,
    NotInWorkflow,
    QueryError,
    UnknownQuery,
    UnknownWorkflowType,
    WorkflowDefinitionError,
    WorkflowDeterminismError,
    WorkflowError,
)
from slotflow.workflow.replayer import Replayer, ReplayResult

__all__ = [
    "ActivityError",
    "ActivityInputError",
    "ActivityTimeoutError",
    "CancelledError",
    "ChildWorkflowError",
    "ChildWorkflowHandle",
    "Compensation",
    "HistoryLimitExceeded",
    "InvalidHistory",
    "NonDeterminismError",
    "NotInWorkflow",
    "ParentClosePolicy",
    "QueryError",
    "ReplayResult",
    "Replayer",
    "RetryPolicy",
    "Saga",
    "SearchAttribute",
    "UnknownQuery",
    "UnknownWorkflowType",
    "WorkflowDefinitionError",
    "WorkflowDeterminismError",
    "WorkflowError",
    "WorkflowInfo",
    "continue_as_new",
    "create_task",
    "defn",
    "deprecate_patch",
    "execute_activity",
    "execute_child_workflow",
    "gather",
    "info",
    "memo",
    "now",
    "patched",
    "query",
    "random",
    "run",
    "signal",
    "sleep",
    "start_child_workflow",
    "upsert_memo",
    "upsert_search_attributes",
    "uuid4",
    "wait_condition",
    "wait_signal",
]
