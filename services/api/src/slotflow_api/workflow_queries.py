"""A workflow's query, asked of the orchestrator that holds its shard (docs/decisions/0010).

The shard is the commands topic's partition of the workflow id; `query_route(shard)` (a function
of the orchestrator's schema, the only thing of it the api may call) names the lease owner, its
query listener and the lease token; the listener answers only under that token. A shard that moves
meanwhile (`moved`), an owner that does not answer, or no owner at all is asked again, the route
read afresh each time, until the query's deadline.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from slotflow.contracts.queries import QueryRequest
from slotflow.errors import SlotflowError
from slotflow.kafka.producer import Producer, key_partition
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow_api.sql.queries import QUERY_ROUTE

#: Pause between two asks of a moving or silent shard.
RETRY_PAUSE_S = 0.1


class QueryUnanswered(SlotflowError):
    """No orchestrator answered the query before its deadline (the detail says what was tried)."""


class QueryRefused(SlotflowError):
    """The orchestrator that holds the workflow answered, and refused: its status and reason."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    result: Any
    status: str


class Queries:
    """Asks queries of the orchestrators (one per api process; `close()` at shutdown)."""

    def __init__(
        self, pool: Pool, producer: Producer, *, schema: str, commands_topic: str, token: str | None
    ) -> None:
        self._pool = pool
        self._producer = producer
        self._route = sql(QUERY_ROUTE, schema)
        self._topic = commands_topic
        self._headers = {"authorization": f"Bearer {token}"} if token is not None else {}
        self._http = httpx.AsyncClient(headers=self._headers)
        self._shards: int | None = None

    async def close(self) -> None:
        await self._http.aclose()

    async def ask(self, workflow_id: str, query: str, arg: Any, *, timeout: float) -> QueryAnswer:
        """The answer of the orchestrator that holds ``workflow_id``.

        Raises:
            QueryRefused: the owner refused (unknown workflow or query, a handler that did more
                than read, a stuck workflow, a purged history).
            QueryUnanswered: nobody answered before ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        if self._shards is None:
            self._shards = await self._producer.partition_count(self._topic)
        shard = key_partition(workflow_id, self._shards)
        problem = f"no orchestrator holds shard {shard}"
        while True:
            try:
                route = await self._pool.fetchrow(self._route, shard)
            except (
                asyncpg.UndefinedFunctionError,
                asyncpg.InvalidSchemaNameError,
                asyncpg.InsufficientPrivilegeError,
            ) as err:
                raise QueryUnanswered(
                    f"the api cannot ask the orchestrators' schema which orchestrator holds workflow "
                    f"{workflow_id!r} ({type(err).__name__}: {err}): is an orchestrator of this version "
                    "migrated there, and may the api's role use it (SLOTFLOW_API_ORCHESTRATOR_SCHEMA, "
                    "`slotflow db bootstrap-roles`)?"
                ) from None
            if route is not None and route["lease_owner"] is not None:
                left = deadline - time.monotonic()
                try:
                    reply = await self._http.post(
                        f"{route['listener'].rstrip('/')}/queries",
                        json=QueryRequest(
                            workflow_id=workflow_id,
                            query=query,
                            arg=arg,
                            shard=shard,
                            lease_token=int(route["lease_token"]),
                        ).model_dump(mode="json"),
                        timeout=max(left, 0.05),
                    )
                except httpx.HTTPError as err:
                    problem = (
                        f"orchestrator {route['lease_owner']} (shard {shard}, {route['listener']}) "
                        f"did not answer: {type(err).__name__}: {err}"
                    )
                else:
                    body = _json(reply)
                    if reply.status_code == 200:
                        return QueryAnswer(result=body.get("result"), status=str(body.get("status", "")))
                    error = str(body.get("error", "error"))
                    detail = str(body.get("detail", reply.text[:500]))
                    if reply.status_code != 409 or error != "moved":
                        raise QueryRefused(reply.status_code, error, detail)
                    problem = f"shard {shard} moved while it was asked: {detail}"
            if time.monotonic() + RETRY_PAUSE_S >= deadline:
                raise QueryUnanswered(
                    f"the query of workflow {workflow_id!r} was not answered within {timeout:g} s: {problem}"
                )
            await asyncio.sleep(RETRY_PAUSE_S)


def _json(reply: httpx.Response) -> dict[str, Any]:
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
