"""What `slotflow.client` raises: one class per way a call can fail, all `SlotflowError`s.

Branch on the class, never on the message text::

    try:
        await client.pause_schedule("nightly-payouts", wait=10)
    except CommandRejected as err:
        print("refused:", err.reason)
    except NotAuthorized:
        print("check SLOTFLOW_TOKEN")
"""

from slotflow.errors import PermanentError, SlotflowError, TransientError


class ClientError(SlotflowError):
    """A slotflow client call failed."""

    #: The api's HTTP status when the api answered with this error, else None.
    status: int | None = None
    #: The api's `detail` flattened to text, with `(HTTP n)`, when the api answered, else None.
    detail: str | None = None


class InvalidRequest(ClientError, PermanentError):
    """The request is malformed: a bad field, an unusable command id (the api's 422, or refused before sending)."""


class NotAuthorized(ClientError, PermanentError):
    """The api refused the call: no token, or an unknown, revoked or expired one (HTTP 401)."""


class Forbidden(NotAuthorized):
    """The token is valid but lacks the scope the call needs (HTTP 403); the message names it."""


class NotFound(ClientError, PermanentError):
    """No such schedule, run, workflow or command (HTTP 404)."""


class Conflict(ClientError, PermanentError):
    """The api refused the request as conflicting with what exists (HTTP 409 outside a command's wait)."""


class CommandRejected(ClientError, PermanentError):
    """The service that owns the command refused it; `reason` says why."""

    def __init__(self, command_id: str, reason: str | None) -> None:
        #: The rejected command's id.
        self.command_id = command_id
        #: Why the owning service refused it (from its CommandRejected event).
        self.reason = reason or "no reason given"
        super().__init__(f"command {command_id} was rejected: {self.reason}")


class WaitTimedOut(ClientError, TransientError):
    """The command's outcome did not arrive in time; it may still be applied (wait again)."""

    def __init__(self, command_id: str, last_status: str, seconds: float) -> None:
        self.command_id = command_id
        #: The last status seen (`unknown`, `pending`).
        self.last_status = last_status
        super().__init__(f"command {command_id} is still {last_status} after {seconds:g} s")


class Unavailable(ClientError, TransientError):
    """The api or Kafka did not answer (or answered 5xx); retrying a command with the same id is safe."""


class ApiError(ClientError):
    """The api answered with an error status the other classes do not cover."""


class BrokerUnreachable(Unavailable):
    """No Kafka broker answered when the Kafka transport connected."""


class ReadsNeedHttp(ClientError, PermanentError):
    """Reads (runs, workflows, schedules, a command's status by id) go through the api: give the
    client an `HttpTransport` for them."""


class WorkflowOutcomeError(ClientError, PermanentError):
    """The workflow a handle waited on ended without a result: failed, cancelled, terminated, or
    its start was refused. Catch this to handle every such end at once; branch on the subclass::

        try:
            receipt = await handle.result()
        except WorkflowFailedError as err:
            print(err.failure_type, err.failure_message)   # CaptureDeclined, card declined
        except WorkflowOutcomeError as err:
            print(err)                                       # cancelled, terminated, refused
    """

    def __init__(self, workflow_id: str, message: str) -> None:
        #: The workflow's id.
        self.workflow_id = workflow_id
        super().__init__(message)


class WorkflowFailedError(WorkflowOutcomeError):
    """The workflow failed: its code raised (an `ActivityError` it did not catch carries the
    activity's error type), or its execution timeout passed (`WorkflowTimedOut`).

    `failure_type` is the error's type name, `failure_message` its message, and `compensated`
    whether every compensation its saga registered ran (None when it registered none).
    """

    def __init__(
        self, workflow_id: str, failure_type: str, failure_message: str, compensated: bool | None = None
    ) -> None:
        #: The type name of what failed it (`CaptureDeclined`, `WorkflowTimedOut`).
        self.failure_type = failure_type
        #: Its message.
        self.failure_message = failure_message
        #: Whether every registered compensation ran; None when there was nothing to undo.
        self.compensated = compensated
        super().__init__(workflow_id, f"workflow {workflow_id} failed: {failure_type}: {failure_message}")


class WorkflowCancelledError(WorkflowOutcomeError):
    """The workflow was cancelled (`CancelWorkflow`): its code saw `CancelledError` and its saga
    undid what it had done (`compensated`)."""

    def __init__(self, workflow_id: str, reason: str | None, compensated: bool | None = None) -> None:
        #: The reason the cancel gave, or None.
        self.reason = reason
        #: Whether every registered compensation ran; None when there was nothing to undo.
        self.compensated = compensated
        super().__init__(workflow_id, f"workflow {workflow_id} was cancelled: {reason or 'no reason given'}")


class WorkflowTerminatedError(WorkflowOutcomeError):
    """The workflow was terminated (`TerminateWorkflow`, or a start with `terminate_running`): it
    ended at once, its code and compensations unrun."""

    def __init__(self, workflow_id: str, reason: str | None) -> None:
        #: The reason the terminate gave, or None.
        self.reason = reason
        super().__init__(workflow_id, f"workflow {workflow_id} was terminated: {reason or 'no reason given'}")


class WorkflowRejectedError(WorkflowOutcomeError):
    """The orchestrator refused the start this handle waits on (an unknown type, an id already
    taken under `reject_duplicate`): no run of it exists; `reason` says why."""

    def __init__(self, workflow_id: str, reason: str | None) -> None:
        #: Why the start was refused.
        self.reason = reason or "no reason given"
        super().__init__(workflow_id, f"the start of workflow {workflow_id} was refused: {self.reason}")


class WorkflowQueryFailedError(ClientError, PermanentError):
    """The orchestrator that holds the workflow refused the query: no such workflow or query
    handler, a handler that did more than read or raised, a stuck workflow, or a closed one whose
    history is no longer kept; `detail` says which (Temporal's `WorkflowQueryFailedError`)."""

    def __init__(self, workflow_id: str, query: str, detail: str) -> None:
        self.workflow_id = workflow_id
        self.query = query
        super().__init__(f"query {query!r} of workflow {workflow_id}: {detail}")


class WorkflowResultTimeoutError(ClientError, TransientError):
    """The workflow had not ended within the wait for its result; it goes on running (wait again).

    This is the caller's wait running out, not the workflow's own `execution_timeout` (which
    fails it: `WorkflowFailedError` with type `WorkflowTimedOut`).
    """

    def __init__(self, workflow_id: str, last_status: str, seconds: float) -> None:
        #: The workflow's id.
        self.workflow_id = workflow_id
        #: Its status when the wait ended (`requested`, `running`, `compensating`, `stuck`, ...).
        self.last_status = last_status
        super().__init__(f"workflow {workflow_id} is still {last_status} after {seconds:g} s")


class WorkflowResultError(ClientError, PermanentError):
    """The workflow completed, but its result cannot be given as asked: it does not fit the result
    type (the run method's return annotation, or `result_type`), or it is too large for the api to
    show (it holds a reference to the stored payload instead)."""

    def __init__(self, workflow_id: str, message: str) -> None:
        #: The workflow's id.
        self.workflow_id = workflow_id
        super().__init__(message)


class ClientClosed(ClientError):
    """A call on a `SyncClient` (or one of its handles) after its `close`, or from its own event
    loop (which would wait for itself)."""
