"""Workflows: list, show (state derived from the typed history), history, commands."""

from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime

from slotflow.contracts import CancelWorkflow, RetryActivity, SignalWorkflow, StartWorkflow, TerminateWorkflow
from slotflow.contracts.acceptance import INT4_MAX
from slotflow.contracts.search import typed_search_attributes
from slotflow.core.durations import parse_duration_text
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import BadQuery, BadRequest, NotFound, WorkflowClosed
from slotflow_api.paths import workflow_id_param
from slotflow_api.query import MAX_QUERY_LENGTH, QueryError
from slotflow_api.routes.commands import COMMAND_RESPONSES, publish_checked, submit
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.routes.schedules import IdempotencyKey
from slotflow_api.schemas import (
    BulkWorkflowItem,
    BulkWorkflowsAnswer,
    BulkWorkflowsBody,
    CancelBody,
    HistoryEntry,
    Page,
    QueryAnswerOut,
    QueryBody,
    SignalBody,
    StartWorkflowBody,
    Workflow,
    WorkflowDetail,
)
from slotflow_api.workflow_queries import QueryRefused, QueryUnanswered

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["workflows"], route_class=DeepJsonRoute)

#: The workflow id of a route: `{workflow_id:path}` matches an id with `/` (escaped or not, see
#: slotflow_api.paths), and the dependency unescapes and checks it.
WorkflowId = Annotated[str, Depends(workflow_id_param)]


@router.get(
    "/v1/workflows",
    response_model=Page[Workflow],
    summary="List workflows, newest first",
    responses={
        400: {"description": "the query does not parse or type: `detail` says where (the character) and what"}
    },
)
async def list_workflows(
    s: Annotated[Services, Depends(services)],
    workflow_type: Annotated[str | None, Query(alias="type", max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=50)] = None,
    start: Annotated[AwareDatetime | None, Query(alias="from")] = None,
    end: Annotated[AwareDatetime | None, Query(alias="to")] = None,
    attention: Annotated[
        str | None,
        Query(
            max_length=50,
            description="only the workflows that need an operator: stuck on a non-determinism, "
            "waiting on a parked activity, or waiting on a signal for longer than this age (`30m`, "
            "`1h`, `2d`, seconds, or ISO 8601 `PT1H`)",
        ),
    ] = None,
    query: Annotated[
        str | None,
        Query(
            max_length=MAX_QUERY_LENGTH,
            description="a condition on built-in fields and search attributes (docs/api.md, "
            "\"Listing workflows by a query\"): `Customer = 'acme' AND (Stage IN ('paid', 'shipped') "
            "OR AmountCents > 10000) AND StartTime >= '2026-12-01T00:00:00Z'`; a query that does not "
            "parse or type is a 400 naming the position",
            examples=[
                "WorkflowType = 'orders.checkout' AND ExecutionStatus = 'Running' AND Customer = 'acme'"
            ],
        ),
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    if start is not None and end is not None and end <= start:
        raise BadRequest("`to` must be after `from`")
    age = _attention_age(attention) if attention is not None else None
    try:
        return await read_model.list_workflows(
            s.pool,
            s.schema,
            workflow_type=workflow_type,
            status=status,
            start=start,
            end=end,
            limit=limit,
            cursor=cursor,
            attention=age,
            query=query,
        )
    except QueryError as err:
        raise BadQuery(f"query: {err}") from err


def _attention_age(text: str) -> timedelta:
    """The age of the `attention` filter; a 400 naming the forms it takes otherwise."""
    try:
        age = parse_duration_text(text)
    except ValueError as err:
        raise BadRequest(f"attention: {err}") from err
    if age < timedelta(0):
        raise BadRequest(f"attention: {text!r} is negative; give the age a wait must pass, e.g. 1h")
    return age


@router.get(
    "/v1/workflows/{workflow_id:path}/history",
    response_model=Page[HistoryEntry],
    summary="Everything recorded about a workflow, oldest first",
    responses={404: {"description": "no such workflow"}},
)
async def get_history(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    origin: Annotated[
        Literal["command", "history", "activity", "timer"] | None,
        Query(description="only entries from this source; `history` is the typed workflow history"),
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    page = await read_model.workflow_history(
        s.pool, s.schema, workflow_id, limit=limit, cursor=cursor, origin=origin
    )
    missing = not page.items and cursor is None
    if missing and await read_model.get_workflow(s.pool, s.schema, workflow_id) is None:
        raise NotFound(f"workflow {workflow_id!r} is not known (yet)")
    return page


@router.post("/v1/workflows", status_code=202, responses=COMMAND_RESPONSES, summary="Start a workflow")
async def start_workflow(
    s: Annotated[Services, Depends(services)],
    body: StartWorkflowBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    timeout = body.execution_timeout_seconds
    message = StartWorkflow(
        workflow_id=body.workflow_id,
        workflow_type=body.workflow_type,
        input=body.input,
        id_reuse_policy=body.id_reuse_policy,
        execution_timeout=timedelta(seconds=timeout) if timeout is not None else None,
        memo=body.memo,
        # Checked by the body already: a bad attribute is the body's 422.
        search_attributes=typed_search_attributes(body.search_attributes),
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


#: Statuses after which a workflow takes no signal, cancel or terminate: its code has ended (or
#: never started). The orchestrator would only reject such a command later; the operator deserves
#: the answer now, and the dashboard hides the buttons for the same statuses.
CLOSED_STATUSES = frozenset({"completed", "failed", "terminated", "cancelled", "rejected"})
_CLOSED_RESPONSE: dict[int | str, dict[str, Any]] = {
    409: {"description": "the workflow has ended (completed, failed, terminated, cancelled, rejected)"}
}


async def _require_open(
    s: Services, workflow_id: str, action: str, start_command_id: str | None = None
) -> None:
    """Refuse ``action`` on a workflow the read model shows closed, or whose newest run is not the
    one ``start_command_id`` began; one not known yet passes (its start may not be projected yet),
    and the orchestrator decides.

    Raises:
        WorkflowClosed: the workflow (or the run named) has ended.
    """
    row = await read_model.get_workflow(s.pool, s.schema, workflow_id)
    _require_run(workflow_id, row, action, start_command_id)
    status = row.get("status") if row is not None else None
    if status in CLOSED_STATUSES:
        raise WorkflowClosed(
            f"workflow {workflow_id!r} is {status}: a {action} applies only to a workflow that has not "
            "ended (requested, running, compensating or stuck); nothing was published"
        )


def _require_run(
    workflow_id: str, row: dict[str, Any] | None, action: str, start_command_id: str | None
) -> None:
    """Refuse ``action`` meant for the run ``start_command_id`` began when the read model shows
    another run of the id (one not shown yet passes: the orchestrator decides).

    Raises:
        WorkflowClosed: the named run is not the id's current one.
    """
    current = row.get("start_command_id") if row is not None else None
    if start_command_id is not None and current is not None and current != start_command_id:
        raise WorkflowClosed(
            f"workflow {workflow_id!r}'s current run was started by command {current!r}, not "
            f"{start_command_id!r}: a {action} meant for that run does not reach another; nothing was published"
        )


# -- bulk cancel and terminate ----------------------------------------------------------------------

#: Statuses a bulk cancel takes. A compensating workflow is left out: its compensations already
#: run, and a cancel would be delivered to the code running them (cancel it alone if that is meant).
_CANCEL_TAKES = frozenset({"requested", "running", "stuck"})
#: Statuses a bulk terminate takes: every open one (a compensating workflow ends with its
#: compensations unfinished, which the answer counts).
_TERMINATE_TAKES = frozenset({"requested", "running", "stuck", "compensating"})
#: The workflows a dry run lists (the count says how many in all).
BULK_SHOWN = 20
_BULK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": BulkWorkflowsAnswer, "description": "a dry run (`dry_run: true`): what it would touch"},
    422: {
        "description": "a selection that does not narrow without `all: true`, or one that takes no "
        "workflow (the detail says why)"
    },
    503: COMMAND_RESPONSES[503],
}

BulkAction = Literal["cancel", "terminate"]


async def _bulk_workflows(
    s: Services, action: BulkAction, body: BulkWorkflowsBody, idempotency_key: str | None
) -> JSONResponse:
    """Select, answer the dry run, or publish one command per workflow taken.

    Raises:
        BadRequest: the selection does not narrow and does not say `all`, or takes no workflow.
    """
    selection = read_model.WorkflowSelection(
        workflow_ids=tuple(dict.fromkeys(body.workflow_ids)),
        workflow_type=body.workflow_type,
        status=body.status,
    )
    takes = _CANCEL_TAKES if action == "cancel" else _TERMINATE_TAKES
    chosen = await read_model.select_workflows(
        s.pool,
        s.schema,
        selection,
        takeable=takes,
        cancel_requested_too=action == "terminate",
        limit=body.limit,
        shown=BULK_SHOWN,
    )
    matched = sum(chosen.counts.values())
    if not (selection.workflow_ids or selection.workflow_type is not None or body.all):
        # The everything-guard: a status alone (or nothing) selects every such workflow.
        raise BadRequest(
            f"the selection names no workflow_ids and no type, so it would {action} every "
            + (f"{body.status} workflow" if body.status else "workflow")
            + f" ({len(chosen.rows)} it can take now, of {matched}); narrow it with workflow_ids or type, "
            'or send "all": true to mean every one'
        )
    left_out = _left_out(action, chosen)
    taken = sum(n for (status, requested), n in chosen.counts.items() if _taken(action, status, requested))
    compensating = sum(n for (status, _), n in chosen.counts.items() if status == "compensating")
    answer = BulkWorkflowsAnswer(
        action=action,
        dry_run=body.dry_run,
        count=len(chosen.rows),
        workflows=[],
        more=taken - len(chosen.rows),
        left_out_count=sum(left_out.values()),
        left_out=left_out,
        left_out_workflows=[
            _item(row).model_copy(update={"reason": _why(action, row["status"], row["cancel_requested"])})
            for row in chosen.left_out
        ],
        compensating=compensating,
    )
    if not chosen.rows:
        if body.dry_run:
            return JSONResponse(status_code=200, content=answer.model_dump(mode="json"))
        why = "; ".join(f"{reason} ({n})" for reason, n in left_out.items())
        raise BadRequest(
            f"the selection takes no workflow to {action}" + (f": {why}" if why else ": it matches none")
        )
    if body.dry_run:
        answer.workflows = [_item(row) for row in chosen.rows[:BULK_SHOWN]]
        return JSONResponse(status_code=200, content=answer.model_dump(mode="json"))
    command = CancelWorkflow if action == "cancel" else TerminateWorkflow
    for row in chosen.rows:
        # One command per workflow, keyed by it like a single cancel; a retried request with the same
        # Idempotency-Key publishes the same ids, so each workflow applies it once.
        key = None if idempotency_key is None else f"{idempotency_key}:{row['workflow_id']}"
        message = command(workflow_id=row["workflow_id"], reason=body.reason)
        command_id = await publish_checked(s, message, idempotency_key=key)
        answer.workflows.append(_item(row, command_id=command_id))
    return JSONResponse(status_code=202, content=answer.model_dump(mode="json"))


def _taken(action: BulkAction, status: str, cancel_requested: bool) -> bool:
    if action == "cancel":
        return status in _CANCEL_TAKES and not cancel_requested
    return status in _TERMINATE_TAKES


def _left_out(action: BulkAction, chosen: read_model.SelectedWorkflows) -> dict[str, int]:
    """What the selection matches and the action leaves out, by reason."""
    reasons: dict[str, int] = {}
    for (status, cancel_requested), n in sorted(chosen.counts.items()):
        if _taken(action, status, cancel_requested):
            continue
        why = _why(action, status, cancel_requested)
        reasons[why] = reasons.get(why, 0) + n
    if chosen.unknown:
        reasons["not known to the api (yet)"] = len(chosen.unknown)
    return reasons


def _why(action: BulkAction, status: str, cancel_requested: bool) -> str:
    """Why ``action`` leaves out a workflow in ``status``."""
    if status in CLOSED_STATUSES:
        return f"closed ({status}): a workflow that ended takes no {action}"
    if status == "compensating":
        return "compensating already: its compensations run; cancel one alone if meant"
    if cancel_requested:
        return "a cancel was already requested"
    return f"{status}: not a status a {action} applies to"


def _item(row: dict[str, Any], *, command_id: str | None = None) -> BulkWorkflowItem:
    return BulkWorkflowItem(
        workflow_id=row["workflow_id"],
        workflow_type=row["workflow_type"],
        status=row["status"],
        command_id=command_id,
    )


@router.post(
    "/v1/workflows/cancel",
    status_code=202,
    response_model=BulkWorkflowsAnswer,
    responses=_BULK_RESPONSES,
    summary="Cancel every open workflow a selection takes, one CancelWorkflow each "
    "(`dry_run: true`: what it would touch)",
)
async def cancel_workflows(
    s: Annotated[Services, Depends(services)],
    body: BulkWorkflowsBody,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    return await _bulk_workflows(s, "cancel", body, idempotency_key)


@router.post(
    "/v1/workflows/terminate",
    status_code=202,
    response_model=BulkWorkflowsAnswer,
    responses=_BULK_RESPONSES,
    summary="Terminate every open workflow a selection takes, one TerminateWorkflow each: each ends "
    "now, its code and compensations unrun (`dry_run: true`: what it would touch)",
)
async def terminate_workflows(
    s: Annotated[Services, Depends(services)],
    body: BulkWorkflowsBody,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    return await _bulk_workflows(s, "terminate", body, idempotency_key)


@router.post(
    "/v1/workflows/{workflow_id:path}/signal",
    status_code=202,
    responses={**COMMAND_RESPONSES, **_CLOSED_RESPONSE},
    summary="Signal",
)
async def signal_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: SignalBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    await _require_open(s, workflow_id, "signal", body.start_command_id)
    message = SignalWorkflow(
        workflow_id=workflow_id,
        signal=body.signal,
        payload=body.payload,
        start_command_id=body.start_command_id,
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/query",
    response_model=QueryAnswerOut,
    responses={
        400: {"description": "the handler tried to do more than read, raised, or the argument does not fit"},
        404: {"description": "the workflow, or a query handler of that name, is not known"},
        409: {
            "description": "the workflow is stuck (its replay diverged), or `start_command_id` names another run"
        },
        410: {"description": "closed, and its history is no longer kept"},
        503: {
            "description": "no orchestrator answered in time (the shard is moving, or none serves queries)"
        },
    },
    summary="Query: run the workflow's read-only query handler on its current (or final) state; nothing is recorded",
)
async def query_workflow(
    s: Annotated[Services, Depends(services)], workflow_id: WorkflowId, body: QueryBody
) -> JSONResponse:
    if body.start_command_id is not None:
        row = await read_model.get_workflow(s.pool, s.schema, workflow_id)
        _require_run(workflow_id, row, "query", body.start_command_id)
    if s.queries is None:
        return JSONResponse(
            status_code=503, content={"detail": "the api is starting: it asks no queries yet"}
        )
    limit = s.settings.api.query_timeout_seconds
    timeout = min(body.timeout_seconds, limit) if body.timeout_seconds is not None else limit
    try:
        answer = await s.queries.ask(workflow_id, body.query, body.arg, timeout=timeout)
    except QueryRefused as refused:
        return JSONResponse(
            status_code=refused.status, content={"detail": refused.detail, "error": refused.error}
        )
    except QueryUnanswered as unanswered:
        return JSONResponse(status_code=503, content={"detail": str(unanswered)})
    out = QueryAnswerOut(
        workflow_id=workflow_id, query=body.query, result=answer.result, status=answer.status
    )
    return JSONResponse(content=out.model_dump(mode="json"))


@router.post(
    "/v1/workflows/{workflow_id:path}/cancel",
    status_code=202,
    responses={**COMMAND_RESPONSES, **_CLOSED_RESPONSE},
    summary="Cancel",
)
async def cancel_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: Annotated[CancelBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    asked = body or CancelBody()
    await _require_open(s, workflow_id, "cancel", asked.start_command_id)
    message = CancelWorkflow(
        workflow_id=workflow_id, reason=asked.reason, start_command_id=asked.start_command_id
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/terminate",
    status_code=202,
    responses={**COMMAND_RESPONSES, **_CLOSED_RESPONSE},
    summary="Terminate: end now, without running the code or its compensations",
)
async def terminate_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: Annotated[CancelBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    asked = body or CancelBody()
    await _require_open(s, workflow_id, "terminate", asked.start_command_id)
    message = TerminateWorkflow(
        workflow_id=workflow_id, reason=asked.reason, start_command_id=asked.start_command_id
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/activities/{sequence}/retry",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Retry a parked activity: only while the workflow still waits on it (RetryActivity)",
)
async def retry_activity(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    sequence: Annotated[int, Path(ge=1, le=INT4_MAX, description="the activity's sequence")],
    body: Annotated[CancelBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = RetryActivity(workflow_id=workflow_id, sequence=sequence, reason=(body or CancelBody()).reason)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


# Last: `{workflow_id:path}` alone matches every path below /v1/workflows/, so the routes with a
# suffix (history, signal, cancel, terminate, an activity's retry) are matched first.
@router.get(
    "/v1/workflows/{workflow_id:path}",
    response_model=WorkflowDetail,
    summary="One workflow: status, current step, activities, timers, compensations",
    responses={404: {"description": "no such workflow"}},
)
async def get_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    start_command_id: Annotated[
        str | None,
        Query(
            max_length=1000,
            description="the run this StartWorkflow (its command id) began, rather than the newest "
            "run of the id: an id reused after its run closed holds several (404 until it shows)",
        ),
    ] = None,
) -> dict[str, object]:
    row = await read_model.get_workflow(s.pool, s.schema, workflow_id, start_command_id=start_command_id)
    if row is None:
        if start_command_id is not None:
            raise NotFound(
                f"workflow {workflow_id!r} has no run started by command {start_command_id!r} (yet)"
            )
        raise NotFound(f"workflow {workflow_id!r} is not known (yet)")
    return row
