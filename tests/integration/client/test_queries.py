"""Queries on the whole system as processes (real Kafka and PostgreSQL): the client asks the api,
the api finds the orchestrator that holds the workflow's shard (`query_route`) and asks its query
listener, which answers from the replayed state and appends nothing. A closed workflow answers
from its final state; an unknown query, an unknown workflow and a listener asked without its token
are refused with a reason; the CLI prints the answer.
"""

import asyncio
import json
import subprocess
import sys
from datetime import timedelta

import asyncpg
import httpx
import pytest

from slotflow.client import Client, HttpTransport, WorkflowQueryFailedError
from slotflow.testing import assert_eventually
from tests.integration.client.conftest import ADMIN_TOKEN, QUERY_TOKEN, Stack
from tests.integration.client.orders import Checkout, order

RESULT_WITHIN = 120.0


async def test_a_query_reads_the_running_and_the_closed_saga_and_records_nothing(
    stack: Stack, http: HttpTransport, pg_dsn: str
) -> None:
    client = Client(http)
    handle = await client.start_workflow(Checkout.run, order("q-1", hold=timedelta(seconds=8)), id="q-1")

    async def holding() -> bool:
        try:
            return bool(await handle.query("stage") == "holding")
        except WorkflowQueryFailedError:
            return False  # not known yet: the orchestrator has not taken its start

    await assert_eventually(holding, timeout=60, message="q-1 answers `holding` while it waits")
    # The orchestrator's own count of events (the read model's may still be catching up).
    recorded = await asyncpg.connect(pg_dsn)
    last = "SELECT last_sequence FROM orchestrator.workflows WHERE workflow_id = 'q-1'"
    before = await recorded.fetchval(last)
    for _ in range(5):
        assert await handle.query("stage", result_type=str) == "holding"
    await asyncio.sleep(0.5)
    assert await recorded.fetchval(last) == before  # nothing appended
    await recorded.close()

    await handle.result(timeout=RESULT_WITHIN, poll_interval=0.3)
    # Closed: answered from its final state.
    assert await client.query_workflow("q-1", "stage") == "capturing"

    with pytest.raises(WorkflowQueryFailedError, match="has no query 'status'"):
        await handle.query("status")
    with pytest.raises(WorkflowQueryFailedError, match="not known"):
        await client.query_workflow("q-nobody", "stage")


async def test_the_cli_asks_a_query_through_the_api(stack: Stack, http: HttpTransport) -> None:
    client = Client(http)
    await client.start_workflow(Checkout.run, order("q-2", hold=timedelta(minutes=10)), id="q-2")

    async def holding() -> bool:
        try:
            return bool(await client.query_workflow("q-2", "stage") == "holding")
        except WorkflowQueryFailedError:
            return False  # not known yet

    await assert_eventually(holding, timeout=60, message="q-2 holding")

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "slotflow.cli",
            "--api-url",
            stack.api_url,
            "--token",
            ADMIN_TOKEN,
            "--json",
            "workflow",
            "query",
            "q-2",
            "stage",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["result"] == "holding"
    unknown = subprocess.run(
        [
            sys.executable,
            "-m",
            "slotflow.cli",
            "--api-url",
            stack.api_url,
            "--token",
            ADMIN_TOKEN,
            "workflow",
            "query",
            "q-2",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode != 0
    assert "has no query 'nope'" in unknown.stderr
    await client.cancel_workflow("q-2", reason="done", wait=30)


async def test_a_query_listener_asked_without_its_token_answers_401(stack: Stack, pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT address FROM orchestrator.query_listeners")
    finally:
        await conn.close()
    assert len(rows) == 1
    async with httpx.AsyncClient() as plain:
        reply = await plain.post(
            f"{rows[0]['address']}/queries",
            json={"workflow_id": "q-3", "query": "stage", "shard": 0, "lease_token": 1},
        )
    assert reply.status_code == 401
    assert reply.json()["error"] == "unauthorised"
    # With the token, a request that is not a QueryRequest is refused naming the field.
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {QUERY_TOKEN}"}) as api_like:
        bad = await api_like.post(
            f"{rows[0]['address']}/queries", json={"workflow_id": "q-3", "query": "stage"}
        )
    assert bad.status_code == 400
    assert bad.json()["error"] == "bad_request"
    assert "shard" in bad.json()["detail"]
