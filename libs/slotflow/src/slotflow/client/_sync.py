"""`SyncClient`: the client's calls without `await`, for plain scripts and synchronous code.

It runs an asyncio `Client` on an event loop of its own, in a thread of its own, and blocks the
caller until each call is done. The transports live on that loop only, so it works the same from a
plain script, from a thread, and from inside a running event loop (whose thread the call then
blocks: there, prefer the async `Client`).
"""

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from slotflow.client._client import Client, CommandTransport
from slotflow.client._handles import WorkflowHandle
from slotflow.client._http import HttpTransport
from slotflow.client.errors import ClientClosed
from slotflow.client.models import Sent, Workflow
from slotflow.contracts.workflows import IdReusePolicy

P = ParamSpec("P")
R = TypeVar("R")
SelfT = TypeVar("SelfT")
InputT = TypeVar("InputT")
ResultT = TypeVar("ResultT")


class _Loop:
    """An event loop running forever in a daemon thread; `run` hands it a coroutine and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="slotflow-sync-client", daemon=True)
        self.closed = False
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run ``coroutine`` on the loop and return its result (or raise its error) here.

        Raises:
            ClientClosed: the loop is closed, or the caller runs on the loop itself (it would wait
                for itself forever).
        """
        if self.closed:
            coroutine.close()
            raise ClientClosed("this SyncClient is closed")
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise ClientClosed(
                "a SyncClient call from its own event loop would wait for itself; use the async Client"
            )
        future: Future[R] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted here (Ctrl-C, a timeout of the caller's): the call stops there too,
            # rather than going on behind the caller's back.
            future.cancel()
            raise

    def stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Blocking(Generic[P, R]):
    """A `Client` coroutine method as a blocking method of `SyncClient`: the same parameters and
    result, run on the sync client's loop."""

    def __init__(self, method: Callable[Concatenate[Client, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, owner: None, kind: type[Any]) -> "_Blocking[P, R]": ...
    @overload
    def __get__(self, owner: "SyncClient", kind: type[Any]) -> Callable[P, R]: ...
    def __get__(self, owner: "SyncClient | None", kind: type[Any]) -> "_Blocking[P, R] | Callable[P, R]":
        if owner is None:
            return self
        method, client, loop = self._method, owner.client, owner._loop

        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return loop.run(method(client, *args, **kwargs))

        call.__doc__ = self.__doc__
        call.__name__ = getattr(method, "__name__", "call")
        return call


class SyncWorkflowHandle(Generic[ResultT]):
    """`WorkflowHandle` without `await`: what `SyncClient.start_workflow` returns.

    Example::

        handle = client.start_workflow(Checkout.run, order, id="order-1042")
        receipt = handle.result(timeout=600)      # a Receipt
    """

    def __init__(self, handle: WorkflowHandle[ResultT], loop: _Loop) -> None:
        self._handle = handle
        self._loop = loop

    def __repr__(self) -> str:
        return f"Sync{self._handle!r}"

    @property
    def handle(self) -> WorkflowHandle[ResultT]:
        """The async handle (for code that awaits; its calls run on this client's loop only)."""
        return self._handle

    @property
    def workflow_id(self) -> str:
        """The workflow's id."""
        return self._handle.workflow_id

    @property
    def workflow_type(self) -> str | None:
        """Its type name when the handle knows it (started through it), else None."""
        return self._handle.workflow_type

    @property
    def sent(self) -> Sent | None:
        """The StartWorkflow's acknowledgement (`WorkflowHandle.sent`)."""
        return self._handle.sent

    @property
    def start_command_id(self) -> str | None:
        """The command id of the start whose run this handle follows (`WorkflowHandle.start_command_id`)."""
        return self._handle.start_command_id

    def result(self, *, timeout: float | None = None, poll_interval: float = 1.0) -> ResultT:
        """`WorkflowHandle.result`, blocking."""
        return self._loop.run(self._handle.result(timeout=timeout, poll_interval=poll_interval))

    def describe(self) -> Workflow:
        """`WorkflowHandle.describe`, blocking."""
        return self._loop.run(self._handle.describe())

    def query(
        self, query: str, arg: Any = None, *, result_type: Any = None, timeout: float | None = None
    ) -> Any:
        """`WorkflowHandle.query`, blocking."""
        return self._loop.run(self._handle.query(query, arg, result_type=result_type, timeout=timeout))

    def signal(
        self, name: str, payload: Any = None, *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """`WorkflowHandle.signal`, blocking."""
        return self._loop.run(self._handle.signal(name, payload, command_id=command_id, wait=wait))

    def cancel(self, reason: str = "", *, command_id: str | None = None, wait: float | None = None) -> Sent:
        """`WorkflowHandle.cancel`, blocking."""
        return self._loop.run(self._handle.cancel(reason, command_id=command_id, wait=wait))

    def terminate(
        self, reason: str = "", *, command_id: str | None = None, wait: float | None = None
    ) -> Sent:
        """`WorkflowHandle.terminate`, blocking."""
        return self._loop.run(self._handle.terminate(reason, command_id=command_id, wait=wait))


class SyncClient:
    """The slotflow client without `async`: every `Client` call, blocking until it is done.

    It runs a `Client` on a private event loop in a thread of its own, so it works from a plain
    script, a thread, or a synchronous web framework, and from inside a running event loop too
    (it blocks that loop's thread while a call runs: there, the async `Client` is the better fit).
    Pass the transports as to `Client`; close it (or use it as a context manager) to close them and
    stop its thread.

    Example::

        from slotflow.client import HttpTransport, SyncClient

        with SyncClient(HttpTransport("http://127.0.0.1:8080", token=token)) as client:
            client.trigger_schedule("nightly-payouts", wait=10)
            handle = client.start_workflow(Checkout.run, order, id="order-1042")
            receipt = handle.result(timeout=600)          # a Receipt
    """

    def __init__(self, commands: CommandTransport, *, reads: HttpTransport | None = None) -> None:
        self._loop = _Loop()
        #: The async client this one runs (its calls belong on this client's loop only).
        self.client = Client(commands, reads=reads)

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the transports and stop the loop's thread; later calls raise `ClientClosed`."""
        if self._loop.closed:
            return
        try:
            self._loop.run(self.client.close())
        finally:
            self._loop.stop()

    # The calls that take and give the same as `Client`'s (each one's docstring is Client's).
    send = _Blocking(Client.send)
    wait = _Blocking(Client.wait)
    create_schedule = _Blocking(Client.create_schedule)
    update_schedule = _Blocking(Client.update_schedule)
    pause_schedule = _Blocking(Client.pause_schedule)
    resume_schedule = _Blocking(Client.resume_schedule)
    trigger_schedule = _Blocking(Client.trigger_schedule)
    backfill_schedule = _Blocking(Client.backfill_schedule)
    delete_schedule = _Blocking(Client.delete_schedule)
    query_workflow = _Blocking(Client.query_workflow)
    signal_workflow = _Blocking(Client.signal_workflow)
    cancel_workflow = _Blocking(Client.cancel_workflow)
    terminate_workflow = _Blocking(Client.terminate_workflow)
    cancel_workflows = _Blocking(Client.cancel_workflows)
    terminate_workflows = _Blocking(Client.terminate_workflows)
    retry_activity = _Blocking(Client.retry_activity)
    redrive_dead_letters = _Blocking(Client.redrive_dead_letters)
    discard_dead_letters = _Blocking(Client.discard_dead_letters)
    rerun_slots = _Blocking(Client.rerun_slots)
    mark_slots = _Blocking(Client.mark_slots)
    preview_redrive = _Blocking(Client.preview_redrive)
    preview_discard = _Blocking(Client.preview_discard)
    command_status = _Blocking(Client.command_status)
    get_schedule = _Blocking(Client.get_schedule)
    list_schedules = _Blocking(Client.list_schedules)
    get_run = _Blocking(Client.get_run)
    list_runs = _Blocking(Client.list_runs)
    get_workflow = _Blocking(Client.get_workflow)
    list_workflows = _Blocking(Client.list_workflows)
    list_dead_letters = _Blocking(Client.list_dead_letters)
    get_dead_letter = _Blocking(Client.get_dead_letter)

    @overload
    def start_workflow(
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
    ) -> SyncWorkflowHandle[ResultT]: ...

    @overload
    def start_workflow(
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
    ) -> SyncWorkflowHandle[ResultT]: ...

    @overload
    def start_workflow(
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
    ) -> SyncWorkflowHandle[ResultT]: ...

    @overload
    def start_workflow(
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
    ) -> SyncWorkflowHandle[Any]: ...

    def start_workflow(
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
    ) -> SyncWorkflowHandle[Any]:
        """`Client.start_workflow`, blocking; the handle's calls block too.

        Example::

            handle = client.start_workflow(Checkout.run, order, id="order-1042", wait=10)
            receipt = handle.result()          # a Receipt
        """
        # The async client's own overloads are for its callers; this one's already chose the type.
        start: Callable[..., Coroutine[Any, Any, WorkflowHandle[Any]]] = self.client.start_workflow
        handle = self._loop.run(
            start(
                workflow,
                input,
                id=id,
                result_type=result_type,
                id_reuse_policy=id_reuse_policy,
                execution_timeout=execution_timeout,
                memo=memo,
                search_attributes=search_attributes,
                command_id=command_id,
                wait=wait,
            )
        )
        return SyncWorkflowHandle(handle, self._loop)

    @overload
    def execute_workflow(
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
    def execute_workflow(
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
    def execute_workflow(
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
    def execute_workflow(
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

    def execute_workflow(
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
        """`Client.execute_workflow`, blocking: start, then wait for the result.

        Example::

            receipt = client.execute_workflow(Checkout.run, order, id="order-1043", result_timeout=600)
        """
        execute: Callable[..., Coroutine[Any, Any, Any]] = self.client.execute_workflow
        return self._loop.run(
            execute(
                workflow,
                input,
                id=id,
                result_type=result_type,
                id_reuse_policy=id_reuse_policy,
                execution_timeout=execution_timeout,
                memo=memo,
                search_attributes=search_attributes,
                command_id=command_id,
                result_timeout=result_timeout,
            )
        )

    @overload
    def get_workflow_handle(
        self, workflow_id: str, *, start_command_id: str | None = None
    ) -> SyncWorkflowHandle[Any]: ...

    @overload
    def get_workflow_handle(
        self, workflow_id: str, *, result_type: type[ResultT], start_command_id: str | None = None
    ) -> SyncWorkflowHandle[ResultT]: ...

    def get_workflow_handle(
        self, workflow_id: str, *, result_type: Any = None, start_command_id: str | None = None
    ) -> SyncWorkflowHandle[Any]:
        """`Client.get_workflow_handle`: a blocking handle to a workflow started anywhere.

        Example::

            receipt = client.get_workflow_handle("order-1042", result_type=Receipt).result(timeout=60)
        """
        handle = self.client.get_workflow_handle(
            workflow_id, result_type=result_type, start_command_id=start_command_id
        )
        return SyncWorkflowHandle(handle, self._loop)
