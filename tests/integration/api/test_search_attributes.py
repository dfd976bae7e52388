"""Memo and search attributes in the read model, and `GET /v1/workflows?query=` on the real
PostgreSQL: typed histories on the real history topic are folded into the indexed column, and each
query of the filter language finds exactly the workflows it should; a bad query is a 400 naming the
position; injection attempts travel as parameters and change nothing.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import HistoryEvent, SearchAttributesUpserted, WorkflowCompleted, WorkflowStarted
from slotflow.contracts.search import search_attribute, typed_search_attributes
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.contracts.workflows import history_event_id
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import eventually_json

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
PROMISED = datetime(2026, 12, 24, 18, tzinfo=UTC)

#: Four workflows: what each starts with (the type `orders.checkout` unless said).
STARTS: dict[str, dict[str, Any]] = {
    "sa-acme": {
        "Customer": "acme",
        "AmountCents": 12999,
        "Vip": True,
        "PromisedBy": PROMISED,
        "Tags": ["gift", "priority"],
        "Note": {"type": "text", "value": "leave at the door"},
        "Coupon": "XMAS",
    },
    "sa-globex": {"Customer": "globex", "AmountCents": 500, "Vip": False, "Ratio": 0.25},
    "sa-plain": {},
    # A keyword where the others have an int: a range on AmountCents must skip it, not fail.
    "sa-odd": {"Customer": "o'brien", "AmountCents": "lots"},
}


def started(
    workflow_id: str, attributes: dict[str, Any], workflow_type: str = "orders.checkout"
) -> WorkflowStarted:
    return WorkflowStarted(
        workflow_id=workflow_id,
        sequence=1,
        workflow_type=workflow_type,
        command_id=f"{workflow_id}/start",
        memo={"note": f"memo of {workflow_id}"},
        search_attributes=typed_search_attributes(attributes),
    )


async def append(emit: Emitter, workflow_id: str, events: list[HistoryEvent]) -> None:
    for event in events:
        await emit(
            WORKFLOW_HISTORY,
            event,
            id=history_event_id(workflow_id, event.sequence),
            key=workflow_id,
            occurred_at=T0 + timedelta(seconds=event.sequence),
            source="orchestrator",
        )


async def ids(client: httpx.AsyncClient, query: str, **params: str) -> list[str]:
    response = await client.get("/v1/workflows", params={"query": query, "limit": "200", **params})
    assert response.status_code == 200, (query, response.text)
    return sorted(item["workflow_id"] for item in response.json()["items"])


async def seeded(client: httpx.AsyncClient, emit: Emitter) -> None:
    for workflow_id, attributes in STARTS.items():
        await append(emit, workflow_id, [started(workflow_id, attributes)])
    # acme's code upserts: Stage set, Coupon removed; globex's completes.
    upsert = SearchAttributesUpserted(
        workflow_id="sa-acme",
        sequence=2,
        search_attributes={"Stage": search_attribute("paid"), "Coupon": None},
    )
    await append(emit, "sa-acme", [upsert])
    await append(emit, "sa-globex", [WorkflowCompleted(workflow_id="sa-globex", sequence=2, result=None)])
    await eventually_json(client, "/v1/workflows/sa-acme", lambda b: b["last_sequence"] == 2)
    await eventually_json(client, "/v1/workflows/sa-globex", lambda b: b["status"] == "completed")
    for workflow_id in ("sa-plain", "sa-odd"):
        await eventually_json(client, f"/v1/workflows/{workflow_id}", lambda b: b["last_sequence"] == 1)


async def test_queries_find_what_the_histories_say(client: httpx.AsyncClient, emit: Emitter) -> None:
    await seeded(client, emit)
    acme = (await client.get("/v1/workflows/sa-acme")).json()
    assert acme["memo"] == {"note": "memo of sa-acme"}
    assert acme["search_attributes"]["Stage"] == {"type": "keyword", "value": "paid"}
    assert "Coupon" not in acme["search_attributes"]
    assert acme["search_attributes"]["PromisedBy"] == {"type": "datetime", "value": "2026-12-24T18:00:00Z"}
    listed = (await client.get("/v1/workflows", params={"query": "WorkflowId = 'sa-acme'"})).json()["items"]
    assert listed[0]["search_attributes"]["Customer"] == {"type": "keyword", "value": "acme"}

    expected = {
        "Customer = 'acme'": ["sa-acme"],
        "Customer != 'acme'": ["sa-globex", "sa-odd"],
        "Customer IN ('acme', 'globex')": ["sa-acme", "sa-globex"],
        "Customer NOT IN ('acme')": ["sa-globex", "sa-odd"],
        "Customer = 'o''brien'": ["sa-odd"],
        "customer = 'acme'": [],  # names are case-sensitive
        "AmountCents > 1000": ["sa-acme"],
        "AmountCents >= 500 AND AmountCents <= 500": ["sa-globex"],
        "AmountCents < 100000": ["sa-acme", "sa-globex"],  # the keyword 'lots' is skipped, not cast
        "AmountCents = 12999.0": ["sa-acme"],
        "Ratio < 0.5": ["sa-globex"],
        "Vip = true": ["sa-acme"],
        "Vip != TRUE": ["sa-globex"],
        "Tags = 'priority'": ["sa-acme"],
        "Tags IN ('nothing', 'gift')": ["sa-acme"],
        "Note = 'leave at the door'": ["sa-acme"],
        "PromisedBy < '2026-12-25T00:00:00Z'": ["sa-acme"],
        "PromisedBy = '2026-12-24T19:00:00+01:00'": ["sa-acme"],
        "PromisedBy > '2026-12-25T00:00:00Z'": [],
        "Stage = 'paid'": ["sa-acme"],
        "Coupon IS NULL AND WorkflowId IN ('sa-acme', 'sa-globex')": ["sa-acme", "sa-globex"],
        "Coupon = 'XMAS'": [],  # the upsert removed it
        "Stage IS NOT NULL": ["sa-acme"],
        "ExecutionStatus = 'Completed' AND WorkflowId IN ('sa-acme', 'sa-globex', 'sa-plain', 'sa-odd')": [
            "sa-globex"
        ],
        "ExecutionStatus = 'Running' AND WorkflowType = 'orders.checkout' AND Customer IS NOT NULL": [
            "sa-acme",
            "sa-odd",
        ],
        "(Customer = 'acme' OR Customer = 'globex') AND NOT_AN_ATTRIBUTE IS NULL": ["sa-acme", "sa-globex"],
        "Customer = 'acme' OR Customer = 'globex' AND Vip = true": ["sa-acme"],
        "StartTime >= '2000-01-01T00:00:00Z' AND WorkflowId = 'sa-plain'": ["sa-plain"],
        "CloseTime IS NOT NULL AND WorkflowId IN ('sa-acme', 'sa-globex')": ["sa-globex"],
    }
    got = {query: await ids(client, query) for query in expected}
    assert got == expected
    # The query is ANDed with the list's other filters.
    assert await ids(client, "Customer IS NOT NULL", status="completed") == ["sa-globex"]


async def test_a_bad_query_is_a_400_naming_where_and_what(client: httpx.AsyncClient, emit: Emitter) -> None:
    await seeded(client, emit)
    for query, detail in {
        "Customer = ": "query: at 12: expected a value",
        "Customer = 'acme' AND": "query: at 22: expected a field name",
        "ExecutionStatus = 'Sleeping'": "query: at 19: 'Sleeping' is no status",
        "StartTime > 'yesterday'": "query: at 13: StartTime compares with an ISO 8601 instant",
        "Vip > true": "query: at 1: Vip > TRUE/FALSE: a boolean compares only with = and !=",
        "Customer = 'a'; DROP TABLE api.workflows": "query: at 15: unexpected character ';'",
    }.items():
        response = await client.get("/v1/workflows", params={"query": query})
        assert response.status_code == 400, (query, response.text)
        assert response.json()["detail"].startswith(detail), (query, response.json())
    too_long = await client.get("/v1/workflows", params={"query": "A = '" + "x" * 2_000 + "'"})
    assert too_long.status_code == 422


async def test_injection_attempts_are_values_and_change_nothing(
    client: httpx.AsyncClient, emit: Emitter
) -> None:
    await seeded(client, emit)
    attempts = [
        "'; DROP TABLE api.workflows; --",
        "' OR '1'='1",
        "x') OR true OR ('",
        "acme' OR 1=1 --",
        "$1",
        "{schema}.workflows",
        '"Customer": {"type": "keyword", "value": "acme"}}',
        "\\'; SELECT pg_sleep(5); --",
    ]
    for attempt in attempts:
        quoted = "'" + attempt.replace("'", "''") + "'"
        for query in (
            f"Customer = {quoted}",
            f"Customer > {quoted}",
            f"WorkflowId IN ({quoted})",
            f"{quoted[1:-1]}",
        ):
            response = await client.get("/v1/workflows", params={"query": query})
            assert response.status_code in (200, 400), (query, response.text)
            if response.status_code == 200 and query.startswith("Customer = "):
                assert response.json()["items"] == [], query
    # Everything is still there.
    assert len(await ids(client, "WorkflowId IN ('sa-acme', 'sa-globex', 'sa-plain', 'sa-odd')")) == 4


async def test_a_start_through_the_api_is_listed_by_its_attributes_before_its_history(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "workflow_id": "sa-posted",
        "workflow_type": "orders.checkout",
        "memo": {"note": "gift wrap"},
        "search_attributes": {
            "Customer": "initech",
            "AmountCents": 4200,
            "PromisedBy": {"type": "datetime", "value": "2026-12-24T18:00:00Z"},
        },
    }
    assert (await client.post("/v1/workflows", json=body)).status_code == 202
    shown = await eventually_json(client, "/v1/workflows/sa-posted", lambda b: b["status"] == "requested")
    assert shown["memo"] == {"note": "gift wrap"}
    assert shown["search_attributes"]["AmountCents"] == {"type": "int", "value": 4200}
    assert await ids(client, "Customer = 'initech' AND PromisedBy >= '2026-12-24T18:00:00Z'") == ["sa-posted"]

    for attributes, says in (
        ({"WorkflowId": "x"}, "built-in field"),
        ({"Due": {"type": "datetime", "value": "2026-12-24T18:00:00"}}, "timezone-aware"),
        ({"Bad Name": 1}, "not a search attribute name"),
        ({f"A{i}": i for i in range(33)}, "at most 32"),
    ):
        refused = await client.post(
            "/v1/workflows",
            json={
                "workflow_id": "sa-refused",
                "workflow_type": "orders.checkout",
                "search_attributes": attributes,
            },
        )
        assert refused.status_code == 422, refused.text
        assert says in refused.text
    big_memo = await client.post(
        "/v1/workflows",
        json={"workflow_id": "sa-refused", "workflow_type": "orders.checkout", "memo": {"x": "y" * 40_000}},
    )
    assert big_memo.status_code == 422
    assert "memo" in big_memo.text
