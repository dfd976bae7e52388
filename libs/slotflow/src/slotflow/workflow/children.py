"""Child workflows: start one from workflow code, await its result, choose what happens if the
parent ends first (`parent_close_policy`)."""

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from slotflow.contracts.search import check_memo, typed_search_attributes
from slotflow.contracts.workflows import ChildWorkflowScheduled, ParentClosePolicy
from slotflow.workflow._api import _load, _writable
from slotflow.workflow.commands import StartChildWorkflow
from slotflow.workflow.definition import definition_of, to_json_object
from slotflow.workflow.errors import NonDeterminismError, WorkflowError

#: A workflow id's longest form (`IDENTIFIER_PATTERN`: 1 to 200 characters).
_ID_MAX_CHARS = 200
_DIGEST_CHARS = 12


def default_child_id(parent_id: str, sequence: int) -> str:
    """`{parent_id}/child/{sequence}`, or for a parent id too long to leave room for that, a cut
    of it with a digest of the whole (`{cut}-{digest}/child/{sequence}`): always a workflow id
    every service accepts and every route reaches, and the same on every replay."""
    whole = f"{parent_id}/child/{sequence}"
    if len(whole) <= _ID_MAX_CHARS:
        return whole
    digest = hashlib.sha256(parent_id.encode()).hexdigest()[:_DIGEST_CHARS]
    tail = f"-{digest}/child/{sequence}"
    return f"{parent_id[: _ID_MAX_CHARS - len(tail)]}{tail}"


class ChildWorkflowHandle:
    """A started child workflow: `await handle.result()` for its outcome."""

    def __init__(
        self, workflow_id: str, sequence: int, future: "asyncio.Future[Any]", result_type: Any
    ) -> None:
        self.workflow_id = workflow_id
        self.sequence = sequence
        self._future = future
        self._result_type = result_type

    async def result(self) -> Any:
        """The child's result.

        Raises:
            ChildWorkflowError: the child failed, was cancelled or could not start.
        """
        return _load(self._result_type, await self._future)


async def start_child_workflow(
    workflow: type[Any] | str,
    input: Any = None,
    *,
    id: str | None = None,
    parent_close_policy: ParentClosePolicy = "request_cancel",
    result_type: Any = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle:
    """Start a child workflow (its own id and history); returns once its start is recorded.

    ``parent_close_policy``: `request_cancel` (default) cancels a still-running child when this
    workflow ends; `abandon` lets it run on. The default id is `{workflow_id}/child/{sequence}`
    (`default_child_id`: a parent id too long for that gets a cut of it with a digest).
    ``memo`` and ``search_attributes`` are the child's, as `Client.start_workflow` takes them.

    >>> handle = await workflow.start_child_workflow(IssueInvoice, order, id=f"invoice-{order.id}")
    >>> invoice = await handle.result()

    Raises:
        WorkflowError: a search attribute or the memo the start would refuse (nothing is recorded).
    """
    execution = _writable("workflow.start_child_workflow")
    execution.check_cancel()
    name = workflow if isinstance(workflow, str) else definition_of(workflow).name
    payload = to_json_object(input, f"the input of child workflow {name}")
    try:
        attributes = typed_search_attributes(search_attributes)
        child_memo = dict(memo or {})
        check_memo(child_memo)
    except ValueError as err:
        raise WorkflowError(f"child workflow {name}: {err}") from None
    recorded = execution.match(ChildWorkflowScheduled, name)
    if recorded is not None:
        sequence, child_id = recorded.sequence, recorded.child_workflow_id  # type: ignore[attr-defined]
        if id is not None and id != child_id:
            raise NonDeterminismError(
                execution.workflow_id, sequence, f"child workflow id {child_id}", f"child workflow id {id}"
            )
    else:
        sequence = execution.next_sequence
        child_id = id or default_child_id(execution.workflow_id, sequence)
        execution.record(
            ChildWorkflowScheduled,
            child_workflow_id=child_id,
            workflow_type=name,
            input=payload,
            parent_close_policy=parent_close_policy,
            memo=child_memo,
            search_attributes=attributes,
        )
        execution.commands.append(
            StartChildWorkflow(
                execution.workflow_id,
                sequence,
                child_id,
                name,
                payload,
                parent_close_policy,
                memo=child_memo,
                search_attributes=attributes,
            )
        )
    execution.children[sequence] = (child_id, parent_close_policy)
    return ChildWorkflowHandle(child_id, sequence, execution.future_for(sequence), result_type)


async def execute_child_workflow(
    workflow: type[Any] | str,
    input: Any = None,
    *,
    id: str | None = None,
    parent_close_policy: ParentClosePolicy = "request_cancel",
    result_type: Any = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
) -> Any:
    """Start a child workflow and wait for its result (`start_child_workflow` + `result`).

    >>> invoice = await workflow.execute_child_workflow(IssueInvoice, order)
    """
    handle = await start_child_workflow(
        workflow,
        input,
        id=id,
        parent_close_policy=parent_close_policy,
        result_type=result_type,
        memo=memo,
        search_attributes=search_attributes,
    )
    return await handle.result()
