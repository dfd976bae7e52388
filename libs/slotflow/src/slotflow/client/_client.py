"""`Client`: schedules, workflows and reads in typed calls, over Kafka or the api."""

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar, overload

from pydantic import BaseModel, ValidationError

from slotflow.client._handles import WorkflowHandle, resolve_workflow, result_converter, start_input
from slotflow.client._http import HttpTransport, Params, path_segment
from slotflow.client.errors import (
    ApiError,
    CommandRejected,
    Conflict,
    InvalidRequest,
    NotFound,
    ReadsNeedHttp,
    WaitTimedOut,
    WorkflowQueryFailedError,
)
from slotflow.client.models import (
    BulkWorkflowsResult,
    CommandStatus,
    DeadLetter,
    DeadLetterPreview,
    Page,
    RepairResult,
    Run,
    Schedule,
    Sent,
    Workflow,
)
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
from slotflow.contracts.dlq import RedriveDefinition
from slotflow.contracts.policies import OverlapPolicy
from slotflow.contracts.search import SearchAttribute, typed_search_attributes
from slotflow.contracts.workflows import IdReusePolicy
from slotflow.workflow.definition import WorkflowDefinition

M = TypeVar("M", bound=Message)
B = TypeVar("B", bound=BaseModel)
#: The workflow class a run method belongs to, its start input and its result (`start_workflow`).
SelfT = TypeVar("SelfT")
InputT = TypeVar("InputT")
ResultT = TypeVar("ResultT")


class CommandTransport(Protocol):
    """What `Client` sends commands through: `KafkaTransport` or `HttpTransport`."""

    async def send(self, message: Message, *, command_id: str | None = None) -> Sent: ...

    async def wait(self, command_id: str, *, timeout: float) -> CommandStatus: ...

    async def close(self) -> None: ...


def _selection(selection: DeadLetterFilter | None, select_all: bool) -> DeadLetterFilter:
    """The selection of a redrive or discard, through the guard (`DeadLetterFilter.narrows`)."""
    chosen = selection or DeadLetterFilter()
    if select_all and chosen.narrows():
        raise InvalidRequest(
            "all=True selects every dead letter, but the selection narrows it: pass one or the other"
        )
    if not select_all and not chosen.narrows():
        raise InvalidRequest(
            "the selection names no ids and none of source_service, topic, reason, job_id, run_id or "
            "workflow_id: it would take every dead letter (a status or a time range alone still does); "
            "narrow it, or pass all=True to mean every one"
        )
    return chosen


def _result_type_name(definition: WorkflowDefinition | None, result_type: Any) -> str | None:
    """What a handle's result is validated into, for its error messages."""
    if result_type is not None:
        return str(getattr(result_type, "__name__", result_type))
    if definition is not None:
        return f"the return type of {definition.run.__qualname__}"
    return None


def _typed_attributes(values: Mapping[str, Any] | None) -> dict[str, SearchAttribute]:
    """``values`` typed as search attributes (`slotflow.contracts.search`), before anything is sent."""
    try:
        return typed_search_attributes(values)
    except ValueError as err:
        raise InvalidRequest(str(err)) from None


def _build(model: type[M], **fields: Any) -> M:
    """``model`` from ``fields``; a field the contract refuses is an `InvalidRequest` naming it."""
    try:
        return model.model_validate(fields)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else str(e["msg"])
            for e in err.errors()
        )
        raise InvalidRequest(f"{model.__name__}: {problems}") from None


class Client:
    """The slotflow client: every call that issues a command returns a `Sent` with its command id
    (`start_workflow` a `WorkflowHandle`, whose `sent` it is).

    Commands go through ``commands`` (a `KafkaTransport` or an `HttpTransport`); reads need the
    api, so they go through ``reads``, by default ``commands`` when that is an `HttpTransport`.
    Every command call takes ``command_id`` (a retry with the same id is applied once) and
    ``wait``: seconds to wait for the owning service's answer (read-your-writes). With ``wait``,
    the call returns once the command was accepted (`Sent.outcome`), raises `CommandRejected`
    with the reason if it was refused, and `WaitTimedOut` if no answer came in time.

    Example::

        from slotflow.client import Client, HttpTransport

        async with Client(HttpTransport("http://127.0.0.1:8080", token=token)) as client:
            sent = await client.trigger_schedule("nightly-payouts", wait=10)
            print(sent.command_id, sent.outcome.status)   # cmd-…, accepted
            receipt = await client.execute_workflow(Checkout.run, order, id="order-1042")
    """

    def __init__(self, commands: CommandTransport, *, reads: HttpTransport | None = None) -> None:
        self.commands = commands
        self.reads = reads if reads is not None else commands if isinstance(commands, HttpTransport) else None

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close both transports."""
        await self.commands.close()
        if self.reads is not None and self.reads is not self.commands:
            await self.reads.close()

    # -- commands -------------------------------------------------------------------------------

    async def send(
        self, message: Message, *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """Send any command ``message`` (the contract model) and optionally wait for its outcome.

        Example::

            sent = await client.send(ResumeSchedule(schedule_id="nightly-payouts"), wait=10)

        Raises:
            CommandRejected: with ``wait``, the owning service refused it (`reason` says why).
            WaitTimedOut: with ``wait``, no final status within ``wait`` seconds.
            InvalidRequest, NotAuthorized, Forbidden, Unavailable: see `slotflow.client.errors`.
        """
        sent = await self.commands.send(message, command_id=command_id)
        if wait is None:
            return sent
        status = await self.wait(sent.command_id, timeout=wait)
        return self._outcome(sent, status, wait)

    def _outcome(self, sent: Sent, status: CommandStatus, wait: float) -> Sent:
        if status.status == "rejected":
            raise CommandRejected(sent.command_id, status.reason)
        if not status.final:
            raise WaitTimedOut(sent.command_id, status.status, wait)
        return sent.model_copy(update={"outcome": status})

    async def wait(self, command_id: str, *, timeout: float = 10.0) -> CommandStatus:
        """The command's status once final (`accepted`, `rejected` with its `reason`, `published`),
        or its last status (`unknown`, `pending`) after ``timeout`` seconds. A rejection is
        returned, not raised. Over Kafka, only commands this client's transport published can be
        waited on (else `ReadsNeedHttp`); the api can wait on any.

        Read-your-writes over Kafka: the acknowledgement event is read straight from its topic,
        before the api has projected it. With a ``reads`` transport the wait goes on until the api
        reports the same outcome, so what the command changed is visible to this client's reads
        once `wait` returns `accepted` (the api projects the acknowledgement after the change
        it describes: same partition, in order).

        Example::

            sent = await client.pause_schedule("nightly-payouts", reason="bank holiday")
            status = await client.wait(sent.command_id, timeout=10)
            if status.status == "rejected":
                print(status.reason)
        """
        started = time.monotonic()
        status = await self.commands.wait(command_id, timeout=timeout)
        if status.final and self.reads is not None and self.reads is not self.commands:
            remaining = max(timeout - (time.monotonic() - started), 0.1)
            seen = await self.reads.wait(command_id, timeout=remaining)
            return seen if seen.final else status.model_copy(update={"status": "pending"})
        return status

    async def create_schedule(
        self,
        schedule_id: str,
        definition: ScheduleDefinition | Mapping[str, Any],
        *,
        paused: bool = False,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Create a schedule (scope `admin` over HTTP). ``definition`` is a `ScheduleDefinition` or its JSON.

        Example::

            await client.create_schedule(
                "nightly-payouts",
                {"spec": {"kind": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
                 "handler": "payouts.pay_merchants", "retry": {"max_attempts": 3}},
                wait=10,
            )
        """
        message = _build(CreateSchedule, schedule_id=schedule_id, definition=definition, paused=paused)
        return await self.send(message, command_id=command_id, wait=wait)

    async def update_schedule(
        self,
        schedule_id: str,
        *,
        definition: ScheduleDefinition | Mapping[str, Any] | None = None,
        patch: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Replace a schedule's whole ``definition``, or change only the fields a JSON merge
        ``patch`` names (exactly one of the two; scope `admin` over HTTP).

        Example::

            await client.update_schedule("nightly-payouts", patch={"retry": {"max_attempts": 5}}, wait=10)
        """
        message = _build(
            UpdateSchedule,
            schedule_id=schedule_id,
            definition=definition,
            patch=dict(patch) if patch is not None else None,
        )
        return await self.send(message, command_id=command_id, wait=wait)

    async def pause_schedule(
        self,
        schedule_id: str,
        *,
        reason: str = "",
        resume_at: datetime | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Pause a schedule (no slot fires until resumed, or until ``resume_at``).

        Example::

            await client.pause_schedule("nightly-payouts", reason="bank maintenance", wait=10)
        """
        message = _build(PauseSchedule, schedule_id=schedule_id, reason=reason, resume_at=resume_at)
        return await self.send(message, command_id=command_id, wait=wait)

    async def resume_schedule(
        self,
        schedule_id: str,
        *,
        catch_up: bool = False,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Resume a paused schedule. The slots that passed while it was paused are recorded as
        skipped (`paused`) and never fire; with ``catch_up=True`` they meet the schedule's misfire
        policy instead, as slots missed while the ticker was down would.

        Example::

            await client.resume_schedule("nightly-payouts", wait=10)
        """
        message = _build(ResumeSchedule, schedule_id=schedule_id, catch_up=catch_up)
        return await self.send(message, command_id=command_id, wait=wait)

    async def trigger_schedule(
        self, schedule_id: str, *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """Run a schedule's handler once now, outside its grid (a `manual` run).

        Example::

            sent = await client.trigger_schedule("nightly-payouts", wait=10)
            runs = await client.list_runs(job_id="nightly-payouts")
        """
        return await self.send(_build(TriggerNow, schedule_id=schedule_id), command_id=command_id, wait=wait)

    async def backfill_schedule(
        self,
        schedule_id: str,
        start: datetime,
        end: datetime,
        *,
        max_slots: int = 1000,
        overlap: OverlapPolicy = "buffer_all",
        max_concurrent: int = 1,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Run every slot of ``[start, end)`` as a backfill (by default one after another).

        Example::

            await client.backfill_schedule(
                "nightly-payouts", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 4, tzinfo=UTC), wait=10
            )
        """
        message = _build(
            Backfill,
            schedule_id=schedule_id,
            start=start,
            end=end,
            max_slots=max_slots,
            overlap=overlap,
            max_concurrent=max_concurrent,
        )
        return await self.send(message, command_id=command_id, wait=wait)

    async def delete_schedule(
        self, schedule_id: str, *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """Delete a schedule (its runs stay readable; scope `admin` over HTTP).

        Example::

            await client.delete_schedule("nightly-payouts", wait=10)
        """
        return await self.send(
            _build(DeleteSchedule, schedule_id=schedule_id), command_id=command_id, wait=wait
        )

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[SelfT], Awaitable[ResultT]],
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> WorkflowHandle[ResultT]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[SelfT, InputT], Awaitable[ResultT]],
        input: InputT,
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> WorkflowHandle[ResultT]: ...

    @overload
    async def start_workflow(
        self,
        workflow: str | type[Any],
        input: Any = None,
        *,
        id: str,
        result_type: type[ResultT],
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> WorkflowHandle[ResultT]: ...

    @overload
    async def start_workflow(
        self,
        workflow: str | type[Any],
        input: Any = None,
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> WorkflowHandle[Any]: ...

    async def start_workflow(
        self,
        workflow: str | type[Any] | Callable[..., Awaitable[Any]],
        input: Any = None,
        *,
        id: str,
        result_type: Any = None,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> WorkflowHandle[Any]:
        """Start a workflow with the id ``id`` and return its `WorkflowHandle`.

        ``workflow`` is the `@workflow.defn` class's run method (``Checkout.run``: the handle's
        result is typed by its return annotation, and ``input`` checked against its parameter
        before anything is sent), the class itself, or the workflow type name as registered with
        `@workflow.defn(name=...)` (``result_type`` then types the result). ``input`` is a pydantic
        model, a dataclass or a mapping: the start's JSON object. The handle's `sent` is the
        command's acknowledgement (with ``wait``, its `outcome`).

        With ``wait``, an unknown type or an id already taken raises `CommandRejected` here;
        without, the handle's `result()` raises `WorkflowRejectedError` for it.

        ``memo`` is any JSON object shown with the workflow (`describe()`), never searched.
        ``search_attributes`` are typed values the api indexes for `list_workflows(query=...)`:
        a str is a keyword, then bool, int, float, an aware datetime, a list of str (a keyword
        list), or `SearchAttribute(type="text", value=...)` (limits: docs/workflows.md).

        Example::

            from orders.workflow import Checkout

            handle = await client.start_workflow(Checkout.run, order, id="order-1042", wait=10)
            receipt = await handle.result()          # a Receipt

            await client.start_workflow(
                Checkout.run, order, id="order-1043",
                memo={"note": "gift wrap"},
                search_attributes={"Customer": "acme", "AmountCents": 12999},
            )

            # By its type name, as the api and the CLI do:
            handle = await client.start_workflow("orders.checkout", {"order_id": "1042", ...}, id="order-1042")

        Raises:
            InvalidRequest: ``workflow`` is not a workflow (a class without `@workflow.defn`, a
                method without `@workflow.run`), ``input`` is no JSON object or does not fit
                the run method's parameter, or a search attribute or the memo is refused (its
                name, type or size).
            CommandRejected: with ``wait``, the orchestrator refused the start (`reason`).
        """
        return await self._start_workflow(
            workflow,
            input,
            workflow_id=id,
            result_type=result_type,
            id_reuse_policy=id_reuse_policy,
            execution_timeout=execution_timeout,
            memo=memo,
            search_attributes=search_attributes,
            command_id=command_id,
            wait=wait,
        )

    async def _start_workflow(
        self,
        workflow: object,
        input: Any,
        *,
        workflow_id: str,
        result_type: Any,
        id_reuse_policy: IdReusePolicy,
        execution_timeout: timedelta | None,
        memo: Mapping[str, Any] | None,
        search_attributes: Mapping[str, Any] | None,
        command_id: str | None,
        wait: float | None,
    ) -> WorkflowHandle[Any]:
        """`start_workflow` and `execute_workflow`: everything is checked before the start is sent."""
        name, definition = resolve_workflow(workflow)
        converter = result_converter(definition, result_type)
        message = _build(
            StartWorkflow,
            workflow_id=workflow_id,
            workflow_type=name,
            input=start_input(input, name, definition),
            id_reuse_policy=id_reuse_policy,
            execution_timeout=execution_timeout,
            memo=dict(memo or {}),
            search_attributes=_typed_attributes(search_attributes),
        )
        sent = await self.send(message, command_id=command_id, wait=wait)
        return WorkflowHandle(
            self,
            workflow_id,
            workflow_type=name,
            result=converter,
            result_type_name=_result_type_name(definition, result_type),
            sent=sent,
        )

    @overload
    async def execute_workflow(
        self,
        workflow: Callable[[SelfT], Awaitable[ResultT]],
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        result_timeout: float | None = None,
    ) -> ResultT: ...

    @overload
    async def execute_workflow(
        self,
        workflow: Callable[[SelfT, InputT], Awaitable[ResultT]],
        input: InputT,
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        result_timeout: float | None = None,
    ) -> ResultT: ...

    @overload
    async def execute_workflow(
        self,
        workflow: str | type[Any],
        input: Any = None,
        *,
        id: str,
        result_type: type[ResultT],
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        result_timeout: float | None = None,
    ) -> ResultT: ...

    @overload
    async def execute_workflow(
        self,
        workflow: str | type[Any],
        input: Any = None,
        *,
        id: str,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        result_timeout: float | None = None,
    ) -> Any: ...

    async def execute_workflow(
        self,
        workflow: str | type[Any] | Callable[..., Awaitable[Any]],
        input: Any = None,
        *,
        id: str,
        result_type: Any = None,
        id_reuse_policy: IdReusePolicy = "reject_duplicate",
        execution_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
        command_id: str | None = None,
        result_timeout: float | None = None,
    ) -> Any:
        """Start a workflow and wait for its result: `start_workflow`, then the handle's `result`
        (``result_timeout`` bounds that wait; None: until it ends).

        Example::

            receipt = await client.execute_workflow(Checkout.run, order, id="order-1042", result_timeout=3600)

        Raises:
            InvalidRequest: as `start_workflow`.
            WorkflowFailedError, WorkflowCancelledError, WorkflowTerminatedError,
            WorkflowRejectedError, WorkflowResultTimeoutError, WorkflowResultError: as
                `WorkflowHandle.result`.
        """
        handle = await self._start_workflow(
            workflow,
            input,
            workflow_id=id,
            result_type=result_type,
            id_reuse_policy=id_reuse_policy,
            execution_timeout=execution_timeout,
            memo=memo,
            search_attributes=search_attributes,
            command_id=command_id,
            wait=None,
        )
        return await handle.result(timeout=result_timeout)

    @overload
    def get_workflow_handle(
        self, workflow_id: str, *, start_command_id: str | None = None
    ) -> WorkflowHandle[Any]: ...

    @overload
    def get_workflow_handle(
        self, workflow_id: str, *, result_type: type[ResultT], start_command_id: str | None = None
    ) -> WorkflowHandle[ResultT]: ...

    def get_workflow_handle(
        self, workflow_id: str, *, result_type: Any = None, start_command_id: str | None = None
    ) -> WorkflowHandle[Any]:
        """A handle to the workflow ``workflow_id``, started anywhere (the api, the CLI, another
        process); nothing is sent or read until a call on it. ``result_type`` types its result.

        Without ``start_command_id`` the handle follows the newest run of the id: after the id is
        reused (`allow_after_close`, `terminate_running`) it reads the new run. With it (the
        `command_id` of the StartWorkflow, `handle.sent.command_id` of the handle that started it)
        it reads that run only, whatever starts followed.

        Example::

            handle = client.get_workflow_handle("order-1042", result_type=Receipt)
            receipt = await handle.result(timeout=60)
            await client.get_workflow_handle("order-7").cancel("customer asked", wait=10)
            first = client.get_workflow_handle("order-1042", start_command_id=saved_command_id)

        Raises:
            InvalidRequest: ``result_type`` is not a type pydantic can validate.
        """
        return WorkflowHandle(
            self,
            workflow_id,
            result=result_converter(None, result_type),
            result_type_name=_result_type_name(None, result_type),
            start_command_id=start_command_id,
        )

    async def signal_workflow(
        self,
        workflow_id: str,
        signal: str,
        payload: Mapping[str, Any] | None = None,
        *,
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Deliver ``signal`` with ``payload`` to a running workflow (rejected if it has ended).

        ``start_command_id`` scopes it to the run that start began: rejected when the id's current
        run is another (Temporal's ``run_id``). A handle passes its own.

        Example::

            await client.signal_workflow("order-1042", "approved", {"by": "ops"}, wait=10)
        """
        message = _build(
            SignalWorkflow,
            workflow_id=workflow_id,
            signal=signal,
            payload=dict(payload or {}),
            start_command_id=start_command_id,
        )
        return await self.send(message, command_id=command_id, wait=wait)

    async def query_workflow(
        self,
        workflow_id: str,
        query: str,
        arg: Any = None,
        *,
        result_type: Any = None,
        start_command_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Ask the workflow's `@workflow.query` handler ``query`` (with ``arg``) and return what it
        answered, validated into ``result_type`` when given. A query reads the workflow's state as
        its last decision left it (a closed workflow's final state), records nothing, and is
        answered by the orchestrator that holds the workflow, through the api.

        Example::

            progress = await client.query_workflow("order-1042", "progress", result_type=Progress)

        Raises:
            WorkflowQueryFailedError: no such workflow or handler, a handler that did more than read
                or raised, a stuck workflow, a purged history.
            Unavailable: no orchestrator answered in time (its shard was moving, or none serves
                queries: SLOTFLOW_ORCHESTRATOR_QUERY_PORT).
        """
        body: dict[str, Any] = {"query": query, "arg": arg}
        if start_command_id is not None:
            body["start_command_id"] = start_command_id
        if timeout is not None:
            body["timeout_seconds"] = timeout
        path = f"/v1/workflows/{path_segment(workflow_id)}/query"
        try:
            answer = await self._reads().request("POST", path, json=body, timeout=(timeout or 10.0) + 5.0)
        except (InvalidRequest, NotFound, Conflict, ApiError) as err:
            raise WorkflowQueryFailedError(workflow_id, query, str(err)) from None
        return result_converter(None, result_type).load(answer.get("result"))

    async def cancel_workflow(
        self,
        workflow_id: str,
        *,
        reason: str = "",
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Cancel a workflow: it runs its compensations, newest first, and ends `cancelled`
        (``start_command_id``: only the run that start began, as `signal_workflow`).

        Example::

            await client.cancel_workflow("order-1042", reason="customer asked", wait=10)
        """
        message = _build(
            CancelWorkflow, workflow_id=workflow_id, reason=reason, start_command_id=start_command_id
        )
        return await self.send(message, command_id=command_id, wait=wait)

    async def terminate_workflow(
        self,
        workflow_id: str,
        *,
        reason: str = "",
        start_command_id: str | None = None,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """End a workflow at once, without compensating (recorded as failed, `WorkflowTerminated`;
        ``start_command_id``: only the run that start began, as `signal_workflow`).

        Example::

            await client.terminate_workflow("order-1042", reason="stuck on a bad deploy", wait=10)
        """
        message = _build(
            TerminateWorkflow, workflow_id=workflow_id, reason=reason, start_command_id=start_command_id
        )
        return await self.send(message, command_id=command_id, wait=wait)

    async def cancel_workflows(
        self,
        *,
        workflow_ids: Sequence[str] = (),
        workflow_type: str | None = None,
        status: str | None = None,
        all: bool = False,
        reason: str,
        limit: int = 500,
        dry_run: bool = False,
        command_id: str | None = None,
    ) -> BulkWorkflowsResult:
        """Cancel every open workflow a selection takes, one CancelWorkflow each (HTTP only): the
        ids, type and status given, ANDed. Closed workflows and those compensating already are left
        out, with the count; a selection without ids or a type must say ``all``. ``dry_run`` answers
        what it would take and publishes nothing. ``command_id`` keys each command
        (`{command_id}:{workflow id}`), so a retry publishes the same ids.

        Example::

            preview = await client.cancel_workflows(workflow_type="order_saga", status="running",
                                                     reason="carrier outage", dry_run=True)
            print(preview.count, preview.left_out)

        Raises:
            InvalidRequest: no reason, a selection that does not narrow, or one that takes nothing.
        """
        return await self._bulk_workflows(
            "cancel", workflow_ids, workflow_type, status, all, reason, limit, dry_run, command_id
        )

    async def terminate_workflows(
        self,
        *,
        workflow_ids: Sequence[str] = (),
        workflow_type: str | None = None,
        status: str | None = None,
        all: bool = False,
        reason: str,
        limit: int = 500,
        dry_run: bool = False,
        command_id: str | None = None,
    ) -> BulkWorkflowsResult:
        """Terminate every open workflow a selection takes, one TerminateWorkflow each (HTTP only):
        each ends now, its code and compensations unrun (a compensating one with its compensations
        unfinished: `compensating` counts them). Otherwise as `cancel_workflows`.

        Example::

            await client.terminate_workflows(workflow_ids=["order-1042"], reason="bad deploy")

        Raises:
            InvalidRequest: no reason, a selection that does not narrow, or one that takes nothing.
        """
        return await self._bulk_workflows(
            "terminate", workflow_ids, workflow_type, status, all, reason, limit, dry_run, command_id
        )

    async def _bulk_workflows(
        self,
        action: Literal["cancel", "terminate"],
        workflow_ids: Sequence[str],
        workflow_type: str | None,
        status: str | None,
        all: bool,
        reason: str,
        limit: int,
        dry_run: bool,
        command_id: str | None,
    ) -> BulkWorkflowsResult:
        if not reason.strip():
            raise InvalidRequest(f"a bulk {action} needs a reason (it is recorded with each command)")
        body: dict[str, object] = {
            "workflow_ids": list(workflow_ids),
            "all": all,
            "reason": reason,
            "limit": limit,
            "dry_run": dry_run,
        }
        if workflow_type is not None:
            body["type"] = workflow_type
        if status is not None:
            body["status"] = status
        answer = await self._reads().bulk_workflows(action, body, command_id=command_id)
        return BulkWorkflowsResult.model_validate(answer)

    async def retry_activity(
        self,
        workflow_id: str,
        sequence: int,
        *,
        reason: str = "",
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Retry the workflow's parked activity at ``sequence`` (`on_dead_letter="park"`): accepted
        only while the workflow still waits on that exact activity, else rejected with the reason.

        Example::

            await client.retry_activity("order-1042", 5, reason="carrier back", wait=10)
        """
        message = _build(RetryActivity, workflow_id=workflow_id, sequence=sequence, reason=reason)
        return await self.send(message, command_id=command_id, wait=wait)

    async def redrive_dead_letters(
        self,
        selection: DeadLetterFilter | None = None,
        *,
        all: bool = False,
        definition: RedriveDefinition = "as_run",
        limit: int = 1000,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Ask each selected dead letter's owner to redrive it (docs/dlq.md, "Redriving"). With
        ``wait``, `Sent.outcome.summary` says what was done ("redrove 3 dead letter(s); ..."), and a
        selection matching nothing raises `CommandRejected`. Each letter reads `redriving` until
        its owner answers (`get_dead_letter`).

        Example::

            preview = await client.preview_redrive(DeadLetterFilter(reason="unknown_handler"))
            sent = await client.redrive_dead_letters(DeadLetterFilter(reason="unknown_handler"), wait=10)
            print(sent.outcome.summary)

        Raises:
            InvalidRequest: the selection does not narrow (no ids, source, topic, reason, job, run or
                workflow) and ``all`` is not set, or it narrows and ``all`` is set.
        """
        chosen = _selection(selection, all)
        message = _build(RedriveDeadLetters, selection=chosen, all=all, definition=definition, limit=limit)
        return await self.send(message, command_id=command_id, wait=wait)

    async def discard_dead_letters(
        self,
        selection: DeadLetterFilter | None = None,
        *,
        reason: str,
        all: bool = False,
        limit: int = 1000,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Sent:
        """Discard the selected dead letters with ``reason`` (the same guard as a redrive).

        Example::

            await client.discard_dead_letters(DeadLetterFilter(reason="invalid_payload"), reason="fixed", wait=10)
        """
        chosen = _selection(selection, all)
        message = _build(DiscardDeadLetters, selection=chosen, reason=reason, all=all, limit=limit)
        return await self.send(message, command_id=command_id, wait=wait)

    async def rerun_slots(
        self,
        schedule_id: str,
        start: datetime,
        end: datetime | None = None,
        *,
        reason: str,
        force: bool = False,
        dry_run: bool = False,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> RepairResult:
        """Re-run the schedule's slots in ``[start, end]`` (``end`` defaults to ``start``) with its
        current definition (HTTP only: the api chooses the slots with its slot audit).

        Dead-lettered, failed, retrying, cancelled, missed and skipped slots are re-run under their
        own run ids; a running slot is left out, and a completed one too unless ``force``, which runs
        its effect again as the new run `{run id}#rerun-n`. ``dry_run`` answers what it would touch
        and publishes nothing.

        Example::

            preview = await client.rerun_slots("nightly-payouts", since, until, reason="fixed", dry_run=True)
            done = await client.rerun_slots("nightly-payouts", since, until, reason="handler fixed", wait=10)
            print(done.count, [s.reason for s in done.left_out])

        Raises:
            InvalidRequest: no reason, or nothing in the range can be re-run (the api says why).
            NotFound: the api knows no such schedule.
        """
        if not reason.strip():
            raise InvalidRequest("a re-run needs a reason (it is recorded and shown in the audit)")
        body = {"from": start.isoformat(), "reason": reason, "force": force, "dry_run": dry_run}
        if end is not None:
            body["to"] = end.isoformat()
        answer = await self._reads().repair(
            "rerun", schedule_id, body, command_id=command_id, wait=None if dry_run else wait
        )
        return RepairResult.model_validate(answer)

    async def mark_slots(
        self,
        schedule_id: str,
        start: datetime,
        end: datetime | None = None,
        *,
        mark: Literal["done", "skipped"],
        reason: str,
        dry_run: bool = False,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> RepairResult:
        """Mark the schedule's slots in ``[start, end]`` done or skipped with ``reason``; no effect
        runs (HTTP only). Slots whose run is in progress or completed are left out, with the reason.

        Example::

            await client.mark_slots("nightly-payouts", slot, mark="done", reason="paid by hand: FIN-212")

        Raises:
            InvalidRequest: no reason, or nothing in the range can be marked (the api says why).
            NotFound: the api knows no such schedule.
        """
        if not reason.strip():
            raise InvalidRequest("a mark needs a reason (it is recorded and shown in the audit)")
        body: dict[str, object] = {
            "from": start.isoformat(),
            "mark": mark,
            "reason": reason,
            "dry_run": dry_run,
        }
        if end is not None:
            body["to"] = end.isoformat()
        answer = await self._reads().repair(
            "mark", schedule_id, body, command_id=command_id, wait=None if dry_run else wait
        )
        return RepairResult.model_validate(answer)

    async def preview_redrive(
        self,
        selection: DeadLetterFilter | None = None,
        *,
        all: bool = False,
        definition: RedriveDefinition = "as_run",
        limit: int = 1000,
    ) -> DeadLetterPreview:
        """What `redrive_dead_letters` would touch, without doing it (HTTP only).

        Example::

            preview = await client.preview_redrive(DeadLetterFilter(topic="slotflow.jobs.due.v1"))
            print(preview.would_touch, preview.owners, preview.left_out)
        """
        chosen = _selection(selection, all)
        message = _build(RedriveDeadLetters, selection=chosen, all=all, definition=definition, limit=limit)
        return DeadLetterPreview.model_validate(await self._reads().preview(message))

    async def preview_discard(
        self,
        selection: DeadLetterFilter | None = None,
        *,
        all: bool = False,
        limit: int = 1000,
    ) -> DeadLetterPreview:
        """What `discard_dead_letters` would touch, without doing it (HTTP only)."""
        chosen = _selection(selection, all)
        message = _build(DiscardDeadLetters, selection=chosen, reason="preview", all=all, limit=limit)
        return DeadLetterPreview.model_validate(await self._reads().preview(message))

    # -- reads ----------------------------------------------------------------------------------

    def _reads(self) -> HttpTransport:
        if self.reads is None:
            raise ReadsNeedHttp()
        return self.reads

    async def _one(self, model: type[B], path: str) -> B:
        return model.model_validate(await self._reads().get(path))

    async def _page(self, model: type[B], path: str, params: Params) -> Page[B]:
        body = await self._reads().get(path, params)
        items = [model.model_validate(item) for item in body.get("items", [])]
        return Page[model](items=items, next_cursor=body.get("next_cursor"))  # type: ignore[valid-type]

    async def command_status(self, command_id: str) -> CommandStatus:
        """A command's status now, as the api knows it (HTTP only).

        Example::

            status = await client.command_status("cmd-2f1c…")
        """
        return await self._reads().status(command_id)

    async def get_schedule(self, schedule_id: str) -> Schedule:
        """One schedule (raises `NotFound` if there is none).

        Example::

            schedule = await client.get_schedule("nightly-payouts")
            print(schedule.paused, schedule.model_extra["next_slots"])
        """
        return await self._one(Schedule, f"/v1/schedules/{path_segment(schedule_id)}")

    async def list_schedules(
        self,
        *,
        paused: bool | None = None,
        tag: str | None = None,
        handler: str | None = None,
        id_prefix: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Schedule]:
        """One page of schedules matching the filters.

        Example::

            page = await client.list_schedules(paused=True)
        """
        params: Params = {
            "paused": paused,
            "tag": tag,
            "handler": handler,
            "id_prefix": id_prefix,
            "limit": limit,
            "cursor": cursor,
        }
        return await self._page(Schedule, "/v1/schedules", params)

    async def get_run(self, run_id: str) -> Run:
        """One run with its attempts, timings, result or error (raises `NotFound` if there is none).

        Example::

            run = await client.get_run("nightly-payouts@2026-03-01T02:00:00Z")
            if run.state == "completed":
                print(run.result)
        """
        return await self._one(Run, f"/v1/runs/{path_segment(run_id)}")

    async def list_runs(
        self,
        *,
        job_id: str | None = None,
        state: str | None = None,
        schedule_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Run]:
        """One page of runs, newest slot first: of any job (``job_id``), or of one schedule by
        slot range (``schedule_id`` with ``start``/``end``).

        Example::

            page = await client.list_runs(job_id="nightly-payouts", state="completed")
        """
        if schedule_id is not None:
            params: Params = {
                "from": start.isoformat() if start else None,
                "to": end.isoformat() if end else None,
                "state": state,
                "limit": limit,
                "cursor": cursor,
            }
            return await self._page(Run, f"/v1/schedules/{path_segment(schedule_id)}/runs", params)
        if start is not None or end is not None:
            raise InvalidRequest("start/end select a slot range of one schedule: give schedule_id too")
        return await self._page(
            Run, "/v1/runs", {"job_id": job_id, "state": state, "limit": limit, "cursor": cursor}
        )

    async def get_workflow(self, workflow_id: str, *, start_command_id: str | None = None) -> Workflow:
        """One workflow's state (raises `NotFound` if there is none): its newest run, or with
        ``start_command_id`` the run that StartWorkflow began (an id reused after its run closed
        holds several; `NotFound` until the api shows that run).

        Example::

            workflow = await client.get_workflow("order-1042")
            print(workflow.status, workflow.result, workflow.start_command_id)
            first = await client.get_workflow("order-1042", start_command_id=handle.sent.command_id)
        """
        path = f"/v1/workflows/{path_segment(workflow_id)}"
        if start_command_id is None:
            return await self._one(Workflow, path)
        body = await self._reads().get(path, {"start_command_id": start_command_id})
        return Workflow.model_validate(body)

    async def list_workflows(
        self,
        *,
        workflow_type: str | None = None,
        status: Literal[
            "requested",
            "rejected",
            "running",
            "compensating",
            "completed",
            "failed",
            "terminated",
            "cancelled",
            "stuck",
        ]
        | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        attention: timedelta | None = None,
        query: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Workflow]:
        """One page of workflows, newest first. ``attention``: only the ones that need an operator
        (stuck on a non-determinism, waiting on a parked activity, or waiting on a signal for longer
        than that age). ``query``: a condition on built-in fields and search attributes in the
        api's filter language (docs/api.md, "Listing workflows by a query"; Temporal's visibility
        query), ANDed with the other filters.

        Example::

            page = await client.list_workflows(workflow_type="orders.checkout", status="running")
            stranded = await client.list_workflows(attention=timedelta(hours=4))
            big = await client.list_workflows(
                query="Customer = 'acme' AND AmountCents > 10000 AND ExecutionStatus = 'Running'"
            )

        Raises:
            InvalidRequest: the query does not parse or type (the api's 400 names the position).
        """
        params: Params = {
            "type": workflow_type,
            "status": status,
            "from": start.isoformat() if start else None,
            "to": end.isoformat() if end else None,
            "attention": f"{attention.total_seconds():.6f}" if attention is not None else None,
            "query": query,
            "limit": limit,
            "cursor": cursor,
        }
        return await self._page(Workflow, "/v1/workflows", params)

    async def list_dead_letters(
        self,
        *,
        status: str | None = None,
        reason: str | None = None,
        topic: str | None = None,
        source: str | None = None,
        job_id: str | None = None,
        run_id: str | None = None,
        workflow_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """One page of dead letters, newest status change first.

        Example::

            page = await client.list_dead_letters(status="redrive_failed")
            for letter in page.items:
                print(letter.dead_letter_id, letter.note)
        """
        params: Params = {
            "status": status,
            "reason": reason,
            "topic": topic,
            "source": source,
            "job_id": job_id,
            "run_id": run_id,
            "workflow_id": workflow_id,
            "limit": limit,
            "cursor": cursor,
        }
        return await self._page(DeadLetter, "/v1/dlq", params)

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter:
        """One dead letter, with its status and what its redrive's owner answered (`note`)."""
        return await self._one(DeadLetter, f"/v1/dlq/{path_segment(dead_letter_id)}")
