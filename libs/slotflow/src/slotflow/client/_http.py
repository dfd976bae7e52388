"""The HTTP transport: commands and reads through the api, with a bearer token.

Every command goes to its `/v1` endpoint with the command id as `Idempotency-Key` (a retry with
the same id is applied once); `wait` asks `GET /v1/commands/{id}?wait=` until the status is final.
Error statuses become the `slotflow.client.errors` classes: 401 `NotAuthorized`, 403 `Forbidden`,
404 `NotFound`, 409 `CommandRejected` (a waited command) or `Conflict`, 422 `InvalidRequest`,
5xx and no answer `Unavailable`.
"""

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

import httpx

from slotflow.client.errors import (
    ApiError,
    ClientError,
    CommandRejected,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotAuthorized,
    NotFound,
    Unavailable,
)
from slotflow.client.models import CommandStatus, Sent
from slotflow.contracts import (
    Backfill,
    CancelWorkflow,
    CloseDownstream,
    ConfigureDownstream,
    CreateSchedule,
    DeleteSchedule,
    DiscardDeadLetters,
    Message,
    OpenDownstream,
    PauseSchedule,
    RedriveDeadLetters,
    ResumeSchedule,
    RetryActivity,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.routing import InvalidCommandId, check_command_id

#: The api holds a status request open this long at most (its `?wait=` cap).
MAX_WAIT_S = 30.0
Params = Mapping[str, str | int | float | bool | None]


def path_segment(value: str) -> str:
    """``value`` escaped as one URL path segment (run ids hold `@`, `:` and `/`)."""
    return quote(value, safe="")


def http_request(message: Message, *, select_all: bool = False) -> tuple[str, str, dict[str, Any] | None]:
    """The method, path and JSON body that send ``message`` through the api.

    Raises:
        InvalidRequest: the api has no endpoint for this command type.
    """
    data = message.model_dump(mode="json", exclude_none=True)
    if isinstance(
        message, PauseSchedule | ResumeSchedule | TriggerNow | Backfill | DeleteSchedule | UpdateSchedule
    ):
        sid = path_segment(message.schedule_id)
        data.pop("schedule_id")
        if isinstance(message, DeleteSchedule):
            return "DELETE", f"/v1/schedules/{sid}", None
        if isinstance(message, UpdateSchedule):
            if message.patch is not None:
                return "PATCH", f"/v1/schedules/{sid}", dict(message.patch)
            return "PUT", f"/v1/schedules/{sid}", data
        verb = {PauseSchedule: "pause", ResumeSchedule: "resume", TriggerNow: "trigger", Backfill: "backfill"}
        return "POST", f"/v1/schedules/{sid}/{verb[type(message)]}", data or None
    if isinstance(message, CreateSchedule):
        return "POST", "/v1/schedules", data
    if isinstance(message, StartWorkflow):
        if message.parent_workflow_id is not None:
            raise InvalidRequest("a child workflow is started by its parent, not through the api")
        body: dict[str, Any] = {
            "workflow_id": message.workflow_id,
            "workflow_type": message.workflow_type,
            "input": message.input,
            "id_reuse_policy": message.id_reuse_policy,
        }
        if message.execution_timeout is not None:
            body["execution_timeout_seconds"] = message.execution_timeout.total_seconds()
        if message.memo:
            body["memo"] = message.memo
        if message.search_attributes:
            body["search_attributes"] = data["search_attributes"]
        return "POST", "/v1/workflows", body
    if isinstance(message, SignalWorkflow | CancelWorkflow | TerminateWorkflow):
        wid = path_segment(message.workflow_id)
        data.pop("workflow_id")
        verb = {SignalWorkflow: "signal", CancelWorkflow: "cancel", TerminateWorkflow: "terminate"}
        return "POST", f"/v1/workflows/{wid}/{verb[type(message)]}", data
    if isinstance(message, RetryActivity):
        wid = path_segment(message.workflow_id)
        return "POST", f"/v1/workflows/{wid}/activities/{message.sequence}/retry", {"reason": message.reason}
    if isinstance(message, RedriveDeadLetters | DiscardDeadLetters):
        name = "redrive" if isinstance(message, RedriveDeadLetters) else "discard"
        # `all` keeps the selection: it narrows nothing (else the api answers 422), but a status or
        # a time range still says which letters "all" means (every `redrive_failed` one, not every
        # parked one).
        if select_all or message.all:
            data["all"] = True
        else:
            data.pop("all", None)
        return "POST", f"/v1/dlq/{name}", data
    if isinstance(message, OpenDownstream | CloseDownstream):
        action = "open" if isinstance(message, OpenDownstream) else "close"
        return (
            "POST",
            f"/v1/downstreams/{path_segment(message.downstream)}/{action}",
            {"reason": message.reason},
        )
    if isinstance(message, ConfigureDownstream):
        settings = message.settings.model_dump(mode="json", exclude_none=True)
        return "PUT", f"/v1/downstreams/{path_segment(message.downstream)}/settings", settings
    raise InvalidRequest(f"{type(message).__name__} cannot be sent through the api by this client")


class HttpTransport:
    """Talks to the api at ``base_url`` with ``token`` (`Authorization: Bearer`).

    ``timeout`` bounds each request (a waiting one gets its wait on top). ``transport`` is
    httpx's, for tests that serve the api in-process.

    Example::

        async with HttpTransport("https://slotflow.internal", token=os.environ["SLOTFLOW_TOKEN"]) as api:
            client = Client(api)
            run = await client.get_run("nightly-payouts@2026-03-01T02:00:00Z")
    """

    reads_supported = True

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        client_name: str = "client",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # X-Slotflow-Client: the api refuses state-changing requests without it or a JSON body (CSRF).
        headers = {"X-Slotflow-Client": client_name}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._has_token = bool(token)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, transport=transport, headers=headers
        )

    async def __aenter__(self) -> "HttpTransport":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        params: Params | None = None,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        rejected_is_error: bool = True,
    ) -> Any:
        """``method`` on ``path``; its JSON body.

        Raises:
            NotAuthorized / Forbidden / NotFound / Conflict / InvalidRequest / ApiError: the api's answer.
            CommandRejected: a waited command was rejected (409 with a status body).
            Unavailable: nothing answered, it timed out, or it answered 5xx.
        """
        query = {name: _param(value) for name, value in (params or {}).items() if value is not None}
        try:
            response = await self._http.request(
                method,
                path,
                params=query,
                json=json,
                headers=dict(headers or {}),
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TimeoutException as err:
            raise Unavailable(
                f"the slotflow API at {self.base_url} did not answer in time ({type(err).__name__})"
            ) from None
        except httpx.TransportError as err:
            raise Unavailable(
                f"cannot reach the slotflow API at {self.base_url}: {err}; "
                "start it (slotflow-api) or point SLOTFLOW_API_URL / --api-url at it"
            ) from None
        self._raise_for(response, rejected_is_error=rejected_is_error)
        try:
            return response.json()
        except ValueError:
            raise _with_status(
                ApiError(f"the API at {self.base_url} sent a body that is not JSON"), response.status_code
            ) from None

    def _raise_for(self, response: httpx.Response, *, rejected_is_error: bool) -> None:
        status = response.status_code
        if status < 400:
            return
        body = _json(response)
        try:
            self._raise_error(status, body, f"{_detail(response, body)} (HTTP {status})", rejected_is_error)
        except ClientError as err:
            err.status, err.detail = status, f"{_detail(response, body)} (HTTP {status})"
            raise

    def _raise_error(self, status: int, body: Any, detail: str, rejected_is_error: bool) -> None:
        if status == 401:
            hint = "the token was refused" if self._has_token else "no token given: pass one (SLOTFLOW_TOKEN)"
            raise NotAuthorized(f"{detail}; {hint}")
        if status == 403:
            raise Forbidden(detail)
        if status == 404:
            raise NotFound(detail)
        if status == 409 and isinstance(body, dict) and body.get("status") == "rejected":
            if rejected_is_error:
                raise CommandRejected(str(body.get("command_id")), body.get("reason") or detail)
            return
        if status == 409:
            raise Conflict(detail)
        if status in (400, 422):
            raise InvalidRequest(detail)
        if status >= 500:
            raise Unavailable(f"{detail}; retry (a command with the same id is applied once)")
        raise ApiError(detail)

    async def get(self, path: str, params: Params | None = None, *, timeout: float | None = None) -> Any:
        """GET ``path``; its JSON body (errors as in `request`)."""
        return await self.request("GET", path, params, timeout=timeout)

    async def send(
        self, message: Message, *, command_id: str | None = None, select_all: bool = False
    ) -> Sent:
        """Send ``message`` through its api endpoint; the command id the api published it under.

        Raises:
            InvalidRequest: the api (or this client) refused the request before publishing.
            NotAuthorized / Forbidden: the token is missing, refused, or lacks the scope.
            Unavailable: no answer, or Kafka did not acknowledge (retry with the same command id).
        """
        method, path, body = http_request(message, select_all=select_all)
        headers = _idempotency_headers(command_id)
        answer = await self.request(method, path, json=body, headers=headers)
        sent_id = answer.get("command_id") if isinstance(answer, dict) else None
        if not isinstance(sent_id, str):
            raise ApiError(f"{method} {path} answered without a command id")
        return Sent(command_id=sent_id, command_type=message.message_type)

    async def repair(
        self,
        verb: Literal["rerun", "mark"],
        schedule_id: str,
        body: Mapping[str, Any],
        *,
        command_id: str | None = None,
        wait: float | None = None,
    ) -> Any:
        """`POST /v1/schedules/{id}/rerun` or `/mark`: the slots it touches (with `dry_run` in
        ``body``: would touch, nothing published) and those it leaves out, with the reason.

        Raises:
            InvalidRequest: nothing in the range can be touched (the api says why), or a bad body.
            NotFound: the api knows no such schedule.
            CommandRejected: with ``wait``, the ticker rejected the command.
        """
        headers = _idempotency_headers(command_id)
        params: Params = {"wait": f"{wait:.1f}"} if wait else {}
        return await self.request(
            "POST",
            f"/v1/schedules/{path_segment(schedule_id)}/{verb}",
            params,
            json=dict(body),
            headers=headers,
            timeout=wait + 10.0 if wait else None,
        )

    async def bulk_workflows(
        self,
        action: Literal["cancel", "terminate"],
        body: Mapping[str, Any],
        *,
        command_id: str | None = None,
    ) -> Any:
        """`POST /v1/workflows/cancel` or `/terminate`: the workflows a selection takes (with
        `dry_run` in ``body``: would take, nothing published) and what it leaves out, by reason.

        Raises:
            InvalidRequest: a selection that does not narrow without `all`, or one that takes nothing.
        """
        headers = _idempotency_headers(command_id)
        return await self.request("POST", f"/v1/workflows/{action}", {}, json=dict(body), headers=headers)

    async def preview(self, message: RedriveDeadLetters | DiscardDeadLetters) -> Any:
        """What ``message`` would touch: its endpoint with `?dry_run=true` (nothing is published)."""
        _, path, body = http_request(message)
        return await self.request("POST", path, {"dry_run": True}, json=body)

    async def status(self, command_id: str, *, wait: float = 0.0) -> CommandStatus:
        """`GET /v1/commands/{id}` (holding up to ``wait`` s, at most 30, for a final status).

        A rejected command is returned, not raised, here.
        """
        params: Params = {"wait": f"{wait:.1f}"} if wait > 0 else {}
        body = await self.request(
            "GET",
            f"/v1/commands/{path_segment(command_id)}",
            params,
            timeout=wait + 10.0 if wait > 0 else None,
            rejected_is_error=False,
        )
        return CommandStatus.model_validate(body)

    async def wait(self, command_id: str, *, timeout: float) -> CommandStatus:
        """Ask the api until the command's status is final or ``timeout`` s pass (then its last status).

        A server that does not know the id yet may say 404 rather than `unknown`; that is waited out.
        """
        deadline = time.monotonic() + timeout
        status = CommandStatus(command_id=command_id, status="unknown")
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                status = await self.status(command_id, wait=min(remaining, MAX_WAIT_S))
            except NotFound:
                await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0.0)))
                continue
            if status.final:
                break
        return status


def _with_status(err: ClientError, status: int) -> ClientError:
    err.status, err.detail = status, str(err)
    return err


def _param(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _detail(response: httpx.Response, body: Any) -> str:
    detail: Any = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        # FastAPI's validation errors: [{"loc": [...], "msg": "..."}]
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("query", "body", "path"))
                parts.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
        detail = "; ".join(parts)
    if not detail:
        detail = response.text.strip()[:300] or response.reason_phrase
    return str(detail)


def _idempotency_headers(command_id: str | None) -> dict[str, str]:
    """The `Idempotency-Key` header a retried command is sent with, when the caller chose its id.

    Raises:
        InvalidRequest: the id is not one a command may carry.
    """
    if command_id is None:
        return {}
    try:
        return {"Idempotency-Key": check_command_id(command_id)}
    except InvalidCommandId as err:
        raise InvalidRequest(f"command id: {err}") from None
