"""What the workflow SDK raises: all derive from `slotflow.errors.SlotflowError`.

Two families. Errors the workflow code sees and may catch (`ActivityError`, `ChildWorkflowError`,
`TimeoutError` from a timed wait, `asyncio.CancelledError` on a cancel request). And errors that
stop a decision because the code and its history disagree (`NonDeterminismError` and its
`WorkflowDeterminismError`): those are raised out of `WorkflowRuntime.replay`, never turned into a
failed workflow, so the workflow is stuck (not corrupted) until matching code is deployed.
"""

from slotflow.errors import SlotflowError


class WorkflowError(SlotflowError):
    """A workflow SDK error."""


class NonDeterminismError(WorkflowError):
    """Replaying the code against its history took another path than the history recorded.

    `sequence` is the history position where they part, `expected` what the history recorded
    there, `got` what the code did instead. The orchestrator appends `NonDeterminismDetected`
    with these and acts on nothing; the workflow resumes once matching code replays cleanly.
    """

    def __init__(self, workflow_id: str, sequence: int, expected: str, got: str, hint: str = "") -> None:
        self.workflow_id = workflow_id
        self.sequence = sequence
        self.expected = expected
        self.got = got
        message = (
            f"workflow {workflow_id!r} is not deterministic at history sequence {sequence}: "
            f"the history recorded {expected}, the code did {got}"
        )
        super().__init__(f"{message}. {hint}" if hint else message)


class WorkflowDeterminismError(NonDeterminismError):
    """Workflow code used something that cannot replay (asyncio.sleep, a foreign task or future,
    a thread, a socket, time.sleep); the message names what to use instead.

    Raised at the offending call, and raised again out of `replay` even if the code catches it.
    """

    def __init__(self, workflow_id: str, sequence: int, used: str, instead: str) -> None:
        self.used = used
        self.instead = instead
        super().__init__(
            workflow_id,
            sequence,
            "a slotflow.workflow primitive",
            used,
            hint=f"Workflow code must be deterministic: {instead}",
        )


class UnknownWorkflowType(WorkflowError):
    """The history's workflow type is not among the runtime's registered workflows."""


class InvalidHistory(WorkflowError):
    """The history breaks the contract (a gap, no WorkflowStarted, a result for nothing)."""


class WorkflowDefinitionError(WorkflowError):
    """A class decorated with `workflow.defn` is not a valid workflow (no `@workflow.run`, ...)."""


class ActivityInputError(WorkflowError):
    """An activity named by its `@handler` function was called with an argument that does not fit
    the input the handler declares, or the function is not a registered handler. Raised where the
    code calls it, before anything is scheduled.
    """


class NotInWorkflow(WorkflowError):
    """A `slotflow.workflow` primitive was called outside workflow code run by the runtime."""


class QueryError(WorkflowError):
    """A query could not be answered: its handler tried to do more than read (an activity, a
    timer, a recorded marker, an upsert), raised, or returned something that is not JSON."""


class UnknownQuery(QueryError):
    """The workflow has no `@workflow.query` handler of that name."""


class ActivityError(WorkflowError):
    """The activity gave up: raised at `await workflow.execute_activity(...)`.

    `error_type` is the activity's exception type name, `permanent` true for a non-retryable
    error (otherwise its attempts ran out).
    """

    def __init__(self, activity: str, error_type: str, message: str, *, permanent: bool) -> None:
        self.activity = activity
        self.error_type = error_type
        self.error_message = message
        self.permanent = permanent
        super().__init__(f"activity {activity} failed: {error_type}: {message}")


class ActivityTimeoutError(ActivityError):
    """The activity's schedule-to-close deadline passed before it finished."""


class ChildWorkflowError(WorkflowError):
    """A child workflow failed or was cancelled: raised at `await handle.result()`."""

    def __init__(self, workflow_id: str, error_type: str, message: str, *, cancelled: bool) -> None:
        self.workflow_id = workflow_id
        self.error_type = error_type
        self.error_message = message
        self.cancelled = cancelled
        super().__init__(f"child workflow {workflow_id} failed: {error_type}: {message}")


class HistoryLimitExceeded(WorkflowError):
    """The run's history reached its ceiling without `workflow.continue_as_new`.

    Its name is the `error_type` of the WorkflowFailed the runtime records then (the run fails in
    its history; nothing raises this out of `replay`), so `WorkflowFailureError.error_type` and the
    read model show `HistoryLimitExceeded`.
    """


class ContinueAsNew(BaseException):
    """Raised by `workflow.continue_as_new(input)` to end the run; never catch it.

    A BaseException so that `except Exception` in workflow code does not swallow it.
    """

    def __init__(self, workflow_type: str, input: dict[str, object]) -> None:
        self.workflow_type = workflow_type
        self.input = input
        super().__init__(workflow_type)
