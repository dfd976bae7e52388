"""The orchestrator's answers to queries (docs/decisions/0010, docs/workflows.md "Queries").

The api finds the orchestrator that holds a workflow's shard through `query_route(shard)` (owner,
listener address, lease token) and asks its listener::

    POST /queries
    Authorization: Bearer <SLOTFLOW_ORCHESTRATOR_QUERY_TOKEN>
    {"workflow_id": "order-1042", "query": "progress", "arg": null, "shard": 3, "lease_token": 17}

    200 {"result": {...}, "status": "running"}
    409 {"error": "moved", ...}    this orchestrator does not hold the shard under that token
    409 {"error": "stuck", ...}    the workflow's replay diverged from its history
    404 {"error": "not_found" | "unknown_query", ...}
    410 {"error": "purged", ...}   closed, and its history is no longer kept
    400 {"error": "query_failed" | "bad_request", ...}

The listener runs on the service's event loop (uvicorn), so a query never runs beside a decision
on another thread: it reads the workflow's history from the table, replays it in an execution of
its own (`WorkflowRuntime.query`: never the one decisions use) and runs the read-only handler. The
lease is checked before the read and again after the answer: an orchestrator that lost the shard
meanwhile answers `moved`, never a state that another owner may have moved past.
"""

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import uvicorn
from pydantic import ValidationError

from slotflow.contracts import HistoryEvent
from slotflow.contracts.queries import QueryRequest
from slotflow.errors import ConfigurationError
from slotflow.pg.payloads import PostgresPayloadStore
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.runs.registry import problems
from slotflow.workflow import NonDeterminismError, QueryError, UnknownQuery
from slotflow.workflow.payloads import resolve_payloads
from slotflow_orchestrator.deciding import history_of
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.sql import HISTORY, QUERY_WORKFLOW, REGISTER_QUERY_LISTENER

log = logging.getLogger(__name__)

#: The largest request body the listener reads (a query's argument is small).
MAX_BODY_BYTES = 1024 * 1024
QUERIES_PATH = "/queries"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class QueryListenerFailed(ConfigurationError):
    """The query listener could not start (its port taken, its host not this machine's)."""


class Queryable(Protocol):
    """What answers a query from a history (`slotflow.workflow.runtime.WorkflowRuntime.query`)."""

    def query(self, history: Sequence[HistoryEvent], name: str, arg: Any = None, *, now: datetime) -> Any: ...


class QueryAnswers:
    """Answers one query for a workflow of a shard this orchestrator holds."""

    def __init__(self, pool: Pool, *, schema: str, leases: Leases, code: Queryable) -> None:
        self._pool = pool
        self._schema = schema
        self._leases = leases
        self._code = code
        self._payloads = PostgresPayloadStore(pool, schema=schema)
        self._statements = {"row": sql(QUERY_WORKFLOW, schema), "history": sql(HISTORY, schema)}

    async def answer(self, request: QueryRequest) -> tuple[int, dict[str, Any]]:
        """The status and body that answer ``request`` (see the module docstring)."""
        workflow_id, name, arg = request.workflow_id, request.query, request.arg
        shard, token = request.shard, request.lease_token
        if self._leases.held.get(shard) != token:
            return 409, _moved(shard, token)
        row = await self._pool.fetchrow(self._statements["row"], workflow_id)
        if row is None:
            return 404, {"error": "not_found", "detail": f"workflow {workflow_id!r} is not known"}
        if row["shard"] != shard:
            return 409, {
                "error": "moved",
                "detail": f"workflow {workflow_id!r} is on shard {row['shard']}, not {shard}",
            }
        if row["purged"]:
            return 410, {
                "error": "purged",
                "detail": f"workflow {workflow_id!r} is {row['status']} and its history is no longer "
                "kept (SLOTFLOW_ORCHESTRATOR_HISTORY_RETENTION_DAYS): there is no state to query",
            }
        rows = await self._pool.fetch(self._statements["history"], [workflow_id])
        history = await resolve_payloads(history_of([(r["type"], r["data"]) for r in rows]), self._payloads)
        status = str(row["status"])
        try:
            result = self._code.query(history, name, arg, now=datetime.now(UTC))
        except UnknownQuery as err:
            return 404, {"error": "unknown_query", "detail": str(err)}
        except NonDeterminismError as err:
            return 409, {"error": "stuck", "detail": f"workflow {workflow_id!r} is stuck: {err}"}
        except QueryError as err:
            return 400, {"error": "query_failed", "detail": str(err)}
        if self._leases.held.get(shard) != token:
            return 409, _moved(shard, token)
        return 200, {"result": result, "status": status}


def _moved(shard: int, token: int) -> dict[str, Any]:
    return {
        "error": "moved",
        "detail": f"this orchestrator does not hold shard {shard} under lease token {token}: ask its owner again",
    }


class QueryListener:
    """The HTTP listener in front of `QueryAnswers`: `run(stop)` registers its address for the
    api (`query_listeners`) and serves until ``stop``."""

    def __init__(
        self,
        answers: QueryAnswers,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        host: str,
        port: int,
        address: str,
        token: str | None,
    ) -> None:
        self._answers = answers
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._host = host
        self._port = port
        self._address = address
        self._token = token.encode() if token is not None else None

    async def run(self, stop: asyncio.Event) -> None:
        config = uvicorn.Config(
            self.app,
            host=self._host,
            port=self._port,
            interface="asgi3",
            lifespan="off",
            access_log=False,
            log_level="warning",
        )
        server = _QuietServer(config)
        serving = asyncio.create_task(server.serve(), name="orchestrator-queries")
        try:
            while not server.started:
                if serving.done():
                    # uvicorn's answer to a port it cannot bind is SystemExit (it logged why).
                    with contextlib.suppress(SystemExit):
                        serving.result()
                    raise QueryListenerFailed(
                        f"the query listener could not listen on {self._host}:{self._port} "
                        "(SLOTFLOW_ORCHESTRATOR_QUERY_HOST, _QUERY_PORT)"
                    )
                await asyncio.sleep(0.02)
            await self._pool.execute(sql(REGISTER_QUERY_LISTENER, self._schema), self._owner, self._address)
            log.info("orchestrator %s answers queries at %s", self._owner, self._address)
            await stop.wait()
        finally:
            server.should_exit = True
            await serving

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != QUERIES_PATH:
            await _reply(send, 404, {"error": "not_found", "detail": f"only POST {QUERIES_PATH} is served"})
            return
        if scope["method"] != "POST":
            await _reply(send, 405, {"error": "method", "detail": f"{QUERIES_PATH} takes POST"})
            return
        if self._token is not None and not self._authorised(scope):
            await _reply(
                send, 401, {"error": "unauthorised", "detail": "a query needs the listener's bearer token"}
            )
            return
        body = await _body(receive)
        if body is None:
            await _reply(send, 413, {"error": "too_large", "detail": f"at most {MAX_BODY_BYTES} bytes"})
            return
        try:
            request = QueryRequest.model_validate_json(body)
        except ValidationError as err:
            await _reply(send, 400, {"error": "bad_request", "detail": problems(err)})
            return
        status, answer = await self._answers.answer(request)
        await _reply(send, status, answer)

    def _authorised(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return (
                    scheme.lower() == b"bearer"
                    and self._token is not None
                    and hmac.compare_digest(given, self._token)
                )
        return False


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the service's own decide when it stops."""

    def install_signal_handlers(self) -> None:  # uvicorn before 0.29
        return

    def capture_signals(self) -> Any:  # uvicorn 0.29 on
        return contextlib.nullcontext()


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _reply(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
