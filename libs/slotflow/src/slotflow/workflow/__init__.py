"""Durable workflows: ordinary async Python that survives crashes by replaying its history.

One import gives everything workflow code needs::

    from datetime import timedelta
    from slotflow import workflow
    from slotflow.workflow import ActivityError, RetryPolicy, Saga

    @workflow.defn(name="orders.checkout")
    class Checkout:
        def __init__(self) -> None:
            self.address: Address | None = None

        @workflow.run
        async def run(self, order: Order) -> Receipt:
            saga = Saga()
            auth = await workflow.execute_activity(
                "payments.authorize", order, retry=RetryPolicy(max_attempts=5),
                start_to_close=timedelta(seconds=30))
            saga.add_compensation("payments.void", auth)
            await workflow.sleep(timedelta(hours=24))        # a durable timer, never asyncio.sleep
            try:
                return await workflow.execute_activity("payments.capture", auth, result_type=Receipt)
            except ActivityError:
                await saga.compensate()
                raise

        @workflow.signal
        async def address_changed(self, address: Address) -> None:
            self.address = address

Activities are the `@handler` functions of `slotflow.runs`, run by the claimers with run id
`{workflow_id}/{sequence}` (their idempotency key). The workflow body only decides: anything that
touches the world (clock, randomness, network, files, environment) is an activity or one of the
recorded primitives below. The runtime enforces it: asyncio timers, tasks and futures, threads,
sockets and `time.sleep` raise `WorkflowDeterminismError` inside workflow code, and
`slotflow workflow check MODULE` finds host clock, `random`, `uuid` and I/O before deploy.

Reference (each function's docstring has an example):

- defining: `defn`, `run`, `signal`
- activities: `execute_activity` (`RetryPolicy`, `start_to_close`, `schedule_to_close`,
  `non_retryable`; raises `ActivityError` / `ActivityTimeoutError`)
- time: `sleep`, `wait_condition(fn, timeout=)` (raises `TimeoutError`), `now`
- signals: `@signal` handlers, `wait_signal(name, timeout=)`
- concurrency: `create_task`, `gather`
- recorded values: `now`, `random`, `uuid4`; `info()` (ids, history length,
  `is_continue_as_new_suggested`)
- cancellation: a cancel request raises `asyncio.CancelledError` (also `workflow.CancelledError`)
  at the code's next await; the code may clean up and compensate, then re-raise
- sagas: `Saga.add_compensation`, `await saga.compensate()`, `async with Saga()`
- versioning: `patched(id)`, `deprecate_patch(id)`
- long runs: `continue_as_new(input)`; the history ceiling (`HistoryLimitExceeded`)
- children: `start_child_workflow`, `execute_child_workflow`, `ChildWorkflowHandle`
  (raises `ChildWorkflowError`), parent close policy `request_cancel` / `abandon`
- running and checking: `slotflow.workflow.runtime.WorkflowRuntime` (the orchestrator's pure
  step), `Replayer`, `slotflow.workflow.testing.WorkflowEnvironment`
"""

from asyncio import CancelledError

from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.workflows import ParentClosePolicy
from slotflow.workflow.api import (
    WorkflowInfo,
    continue_as_new,
    create_task,
    deprecate_patch,
    execute_activity,
    gather,
    info,
    now,
    patched,
    random,
    sleep,
    uuid4,
    wait_condition,
    wait_signal,
)
from slotflow.workflow.children import ChildWorkflowHandle, execute_child_workflow, start_child_workflow
from slotflow.workflow.definition import defn, run, signal
from slotflow.workflow.errors import (
    ActivityError,
    ActivityTimeoutError,
    ChildWorkflowError,
    HistoryLimitExceeded,
    InvalidHistory,
    NonDeterminismError,
    NotInWorkflow,
    UnknownWorkflowType,
    WorkflowDefinitionError,
    WorkflowDeterminismError,
    WorkflowError,
)
from slotflow.workflow.replayer import Replayer, ReplayResult
from slotflow.workflow.saga import Compensation, Saga

__all__ = [
    "ActivityError",
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
    "ReplayResult",
    "Replayer",
    "RetryPolicy",
    "Saga",
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
    "now",
    "patched",
    "random",
    "run",
    "signal",
    "sleep",
    "start_child_workflow",
    "uuid4",
    "wait_condition",
    "wait_signal",
]
