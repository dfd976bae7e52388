"""`WorkflowHandle`: one workflow seen from outside, and what names a workflow to start.

A handle is what `Client.start_workflow` returns and `Client.get_workflow_handle` makes: the
workflow's id, its result once it ends (`result()`, read from the api's read model), and the
commands that reach it (signal, cancel, terminate).
"""

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

from pydantic import ValidationError
from pydantic.errors import PydanticUserError

from slotflow.client.errors import (
    InvalidRequest,
    NotFound,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowRejectedError,
    WorkflowResultError,
    WorkflowResultTimeoutError,
    WorkflowTerminatedError,
)
from slotflow.client.models import CommandStatus, Sent, Workflow
from slotflow.contracts.workflows import PAYLOAD_REF_KEY, is_payload_ref
from slotflow.workflow.definition import (
    Converter,
    WorkflowDefinition,
    definition_of,
    definition_of_run,
    to_json,
)
from slotflow.workflow.errors import WorkflowDefinitionError

ResultT = TypeVar("ResultT")

#: The read model's statuses after which a workflow's outcome cannot change (`rejected`: its start
#: was refused and no run exists). `stuck` is not one: the run resumes once code matching its
#: history is deployed, so a wait for its result goes on.
ENDED_STATUSES = frozenset({"completed", "failed", "cancelled", "terminated", "rejected"})

#: A wait without a deadline asks about the start's acknowledgement this long at a time.
_START_WAIT_CHUNK_S = 30.0
#: At most this many of a value's validation errors are named in a refusal (the rest counted).
_ERRORS_NAMED = 5


class WorkflowCalls(Protocol):
    """What a handle asks of its client (`Client` has these calls)."""

    async def get_workflow(self, workflow_id: str, *, start_command_id: str | None = None) -> Workflow: ...

    async def wait(self, command_id: str, *, timeout: float = 10.0) -> CommandStatus: ...

    async def query_workflow(
        self,
        workflow_id: str,
        query: str,
        arg: Any = None,
        *,
        result_type: Any = None,
        start_command_id: str | None = None,
        timeout: float | None = None,
    ) -> Any: ...

    async def signal_workflow(
        self,
        workflow_id: str,
        signal: str,
        payload: Mapping[str, Any] | None = None,
        *,
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent: ...

    async def cancel_workflow(
        self,
        workflow_id: str,
        *,
        reason: str = "",
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent: ...

    async def terminate_workflow(
        self,
        workflow_id: str,
        *,
        reason: str = "",
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent: ...


def resolve_workflow(workflow: object) -> tuple[str, WorkflowDefinition | None]:
    """The workflow type name ``workflow`` stands for, and its definition when it is code.

    A type name is taken as given (the orchestrator rejects one it does not serve); a
    `@workflow.defn` class or its `@workflow.run` method (from the class or bound) gives the
    name its decorator registered. Anything else is refused before anything is sent.

    Raises:
        InvalidRequest: ``workflow`` is neither a type name, a workflow class nor its run method.
    """
    if isinstance(workflow, str):
        return workflow, None
    try:
        if isinstance(workflow, type):
            definition = definition_of(workflow)
        elif callable(workflow):
            definition = definition_of_run(workflow)
        else:
            raise WorkflowDefinitionError(
                f"{workflow!r} is not a workflow: pass a @workflow.defn class, its @workflow.run "
                "method or the workflow type name"
            )
    except WorkflowDefinitionError as err:
        raise InvalidRequest(str(err)) from None
    return definition.name, definition


def _problems(err: ValidationError) -> str:
    named = [
        f"{'.'.join(str(part) for part in error['loc']) or '(the value)'}: {error['msg']}"
        for error in err.errors()[:_ERRORS_NAMED]
    ]
    more = err.error_count() - len(named)
    return "; ".join(named) + (f"; and {more} more" if more > 0 else "")


def json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` (a mapping, a pydantic model, a dataclass, or None for ``{}``) as the JSON object a
    command carries.

    Raises:
        InvalidRequest: ``value`` does not serialise to a JSON object.
    """
    if value is None:
        return {}
    try:
        dumped = to_json(value)
    except ValueError as err:  # pydantic's PydanticSerializationError: a value with no JSON form
        raise InvalidRequest(f"{what} cannot be serialised to JSON: {err}") from None
    if not isinstance(dumped, dict):
        raise InvalidRequest(
            f"{what} must be a JSON object (a mapping, a pydantic model or a dataclass), "
            f"not {type(value).__name__}"
        )
    return dumped


def start_input(input: Any, name: str, definition: WorkflowDefinition | None) -> dict[str, Any]:
    """The StartWorkflow's ``input`` for ``input``, checked against the run method's parameter when
    the workflow's code is known, so an input the run could not take is refused here rather than
    failing the workflow once started.

    Raises:
        InvalidRequest: the input is not a JSON object, the run takes no input and one was given,
            or it does not validate into the run's parameter type.
    """
    what = f"the input of workflow {name}"
    if definition is not None and definition.input is None:
        if input is not None:
            raise InvalidRequest(f"{definition.run.__qualname__} takes no input, but {what} was given")
        return {}
    payload = json_object(input, what)
    if definition is not None and definition.input is not None:
        try:
            definition.input.load(payload)
        except ValidationError as err:
            raise InvalidRequest(
                f"{what} does not fit the parameter of {definition.run.__qualname__}: {_problems(err)}"
            ) from None
    return payload


def result_converter(definition: WorkflowDefinition | None, result_type: Any) -> Converter:
    """How a handle validates the result: ``result_type`` when given, else the run method's return
    annotation, else the JSON as the api shows it.

    Raises:
        InvalidRequest: ``result_type`` is not a type pydantic can validate.
    """
    if result_type is not None:
        try:
            return Converter(result_type)
        except PydanticUserError as err:
            raise InvalidRequest(
                f"result_type {result_type!r} is not a type pydantic can validate: {err}"
            ) from None
    if definition is not None:
        return definition.result
    return Converter(Any)


class WorkflowHandle(Generic[ResultT]):
    """One workflow, by its id: wait for its result, signal it, cancel or terminate it, read it.

    `Client.start_workflow` returns one (typed by the run method's return when started as
    ``Checkout.run``); `Client.get_workflow_handle` makes one for a workflow started elsewhere.
    A handle holds no connection of its own: each call goes through its client.

    Example::

        handle = await client.start_workflow(Checkout.run, order, id="order-1042")
        await handle.signal("address_changed", {"zip": "10115"})
        receipt = await handle.result(timeout=600)      # a Receipt, validated
    """

    def __init__(
        self,
        client: WorkflowCalls,
        workflow_id: str,
        *,
        workflow_type: str | None = None,
        result: Converter | None = None,
        result_type_name: str | None = None,
        sent: Sent | None = None,
        start_command_id: str | None = None,
    ) -> None:
        self._client = client
        #: The workflow's id.
        self.workflow_id = workflow_id
        #: Its type name when the handle knows it (started through it), else None.
        self.workflow_type = workflow_type
        #: The StartWorkflow's acknowledgement (its `command_id`, and its `outcome` when the start
        #: waited) when this handle came from `start_workflow`; None from `get_workflow_handle`.
        self.sent = sent
        #: The command id of the StartWorkflow whose run this handle follows (`sent.command_id`
        #: for a handle from `start_workflow`); None: the newest run of the id, whichever it is.
        self.start_command_id = (
            start_command_id
            if start_command_id is not None
            else (sent.command_id if sent is not None else None)
        )
        self._result = result if result is not None else Converter(Any)
        self._result_type_name = result_type_name
        # Whether the start this handle came from is known to be accepted (a wait at the start
        # returns only then); until it is, `result` waits for that answer first.
        self._start_accepted = sent is not None and sent.outcome is not None

    def __repr__(self) -> str:
        return (
            f"WorkflowHandle({self.workflow_id!r}, workflow_type={self.workflow_type!r}, "
            f"start_command_id={self.start_command_id!r})"
        )

    async def result(self, *, timeout: float | None = None, poll_interval: float = 1.0) -> ResultT:
        """Wait until the workflow ends and return its result, validated into the result type the
        handle knows (the run method's return annotation, or `result_type`; else the JSON).

        It reads the api's read model every ``poll_interval`` seconds, so the client needs the api
        for reads (an `HttpTransport`, or ``reads=``). A handle from `start_workflow` first waits for
        the orchestrator's answer to its start: a start refused as a duplicate raises, rather than
        returning the result of the workflow already under that id. It reads the run its start
        began (`start_command_id`), never another run of the same id: an id reused after its run
        closed (`allow_after_close`, `terminate_running`) holds several, and the handle waits for
        its own even while the api still shows the previous one, and reads its own after a later
        start. A handle from `get_workflow_handle` without ``start_command_id`` follows the newest
        run. A `stuck` workflow (a replay diverged) is waited on: it resumes once matching code is
        deployed. ``timeout`` bounds the whole wait (None: until it ends).

        Example::

            handle = await client.start_workflow(Checkout.run, order, id="order-1042")
            try:
                receipt = await handle.result(timeout=3600)
            except WorkflowFailedError as err:
                print(err.failure_type, err.compensated)   # CaptureDeclined True

        Raises:
            WorkflowFailedError: it failed; `failure_type` and `failure_message` say with what.
            WorkflowCancelledError: it was cancelled (`reason`, `compensated`).
            WorkflowTerminatedError: it was terminated (`reason`).
            WorkflowRejectedError: its start was refused (`reason`).
            WorkflowResultTimeoutError: it had not ended within ``timeout`` seconds.
            WorkflowResultError: its result does not fit the result type, or is stored by reference.
            NotFound: a handle from `get_workflow_handle` names a workflow the api does not know.
            InvalidRequest: a negative ``timeout`` or a ``poll_interval`` that is not positive.
        """
        if timeout is not None and timeout < 0:
            raise InvalidRequest(f"timeout must be zero or more seconds (or None: no limit), not {timeout}")
        if poll_interval <= 0:
            raise InvalidRequest(f"poll_interval must be more than zero seconds, not {poll_interval}")
        deadline = None if timeout is None else time.monotonic() + timeout
        await self._wait_for_start(deadline, timeout)
        last_status = "requested"
        while True:
            workflow = await self._read()
            if workflow is not None:
                last_status = workflow.status
                if workflow.status in ENDED_STATUSES:
                    return self._outcome(workflow)
            pause = poll_interval
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WorkflowResultTimeoutError(self.workflow_id, last_status, cast(float, timeout))
                pause = min(pause, remaining)
            await asyncio.sleep(pause)

    async def describe(self) -> Workflow:
        """The handle's run as the api shows it now (`Client.get_workflow`, with the handle's
        `start_command_id`): status, steps, result, error.

        Example::

            shown = await handle.describe()
            print(shown.status, shown.waiting)
        """
        return await self._client.get_workflow(self.workflow_id, start_command_id=self.start_command_id)

    async def signal(
        self, name: str, payload: Any = None, *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """Deliver the signal ``name`` with ``payload`` (a mapping, a pydantic model or a dataclass)
        to the workflow (`Client.signal_workflow`). A handle bound to a run (`start_command_id`:
        one from `start_workflow`) reaches only that run: after its id was reused, the signal is
        rejected rather than delivered to the new run.

        Example::

            await handle.signal("address_changed", Address(zip="10115"), wait=10)
        """
        body = json_object(payload, f"the payload of signal {name!r}")
        return await self._client.signal_workflow(
            self.workflow_id,
            name,
            body,
            start_command_id=self.start_command_id,
            command_id=command_id,
            wait=wait,
        )

    async def query(
        self, query: str, arg: Any = None, *, result_type: Any = None, timeout: float | None = None
    ) -> Any:
        """Ask the workflow's `@workflow.query` handler ``query`` (with ``arg``): what it returns,
        validated into ``result_type`` when given (`Client.query_workflow`). A handle bound to a run
        asks only that run (a reused id's newer run is refused).

        Example::

            progress = await handle.query("progress", result_type=Progress)
        """
        return await self._client.query_workflow(
            self.workflow_id,
            query,
            arg,
            result_type=result_type,
            start_command_id=self.start_command_id,
            timeout=timeout,
        )

    async def cancel(
        self, reason: str = "", *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """Cancel the workflow: its code sees `CancelledError`, its saga compensates, and `result`
        raises `WorkflowCancelledError` (`Client.cancel_workflow`).

        Example::

            await handle.cancel("customer asked", wait=10)
        """
        return await self._client.cancel_workflow(
            self.workflow_id,
            reason=reason,
            start_command_id=self.start_command_id,
            command_id=command_id,
            wait=wait,
        )

    async def terminate(
        self, reason: str = "", *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """End the workflow at once, its code and compensations unrun; `result` raises
        `WorkflowTerminatedError` (`Client.terminate_workflow`).

        Example::

            await handle.terminate("stuck on a bad deploy", wait=10)
        """
        return await self._client.terminate_workflow(
            self.workflow_id,
            reason=reason,
            start_command_id=self.start_command_id,
            command_id=command_id,
            wait=wait,
        )

    async def _wait_for_start(self, deadline: float | None, timeout: float | None) -> None:
        """Wait for the orchestrator's answer to the start this handle came from (no-op when it
        is known, or the handle did not start the workflow)."""
        if self.sent is None or self._start_accepted:
            return
        while True:
            chunk = _START_WAIT_CHUNK_S if deadline is None else max(deadline - time.monotonic(), 0.0)
            status = await self._client.wait(self.sent.command_id, timeout=chunk)
            if status.status == "rejected":
                raise WorkflowRejectedError(self.workflow_id, status.reason)
            if status.final:
                self._start_accepted = True
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise WorkflowResultTimeoutError(self.workflow_id, "requested", cast(float, timeout))

    async def _read(self) -> Workflow | None:
        try:
            return await self._client.get_workflow(self.workflow_id, start_command_id=self.start_command_id)
        except NotFound:
            if self.start_command_id is None:
                raise
            # The api has not shown the run of this start yet (it may show the previous run of a
            # reused id meanwhile, which is not this handle's to answer with).
            return None

    def _outcome(self, workflow: Workflow) -> ResultT:
        """The result of a workflow that ended, or the error its end is."""
        shown = workflow.model_extra or {}
        error = shown.get("error") or {}
        compensated = shown.get("compensated")
        if workflow.status == "completed":
            return self._validated(workflow.result)
        if workflow.status == "failed":
            failure_type = str(error.get("type") or "unknown")
            raise WorkflowFailedError(
                self.workflow_id, failure_type, str(error.get("message") or ""), compensated
            )
        if workflow.status == "cancelled":
            raise WorkflowCancelledError(self.workflow_id, shown.get("cancel_reason"), compensated)
        if workflow.status == "terminated":
            raise WorkflowTerminatedError(self.workflow_id, error.get("message"))
        raise WorkflowRejectedError(self.workflow_id, shown.get("rejection"))

    def _validated(self, value: Any) -> ResultT:
        if is_payload_ref(value):
            raise WorkflowResultError(
                self.workflow_id,
                f"workflow {self.workflow_id} completed, but its result ({value.get('bytes')} bytes) is "
                f"stored by reference ({value[PAYLOAD_REF_KEY]}), which the api shows in its place: "
                "return a smaller result (an id of what the workflow stored, say)",
            )
        try:
            return cast(ResultT, self._result.load(value))
        except ValidationError as err:
            expected = self._result_type_name or "the result type"
            raise WorkflowResultError(
                self.workflow_id,
                f"the result of workflow {self.workflow_id} does not fit {expected}: {_problems(err)}",
            ) from None
