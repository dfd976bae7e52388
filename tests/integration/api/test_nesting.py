"""A value nested past the limit is a 422 naming the field over HTTP, at any depth, never a 500.

Through the api served by uvicorn: a schedule's payload, a workflow's input and a signal's payload
nested 100 levels (one past `FIELD_MAX_DEPTH`), 255 and 256 (pydantic-core's serialiser stops at
255: before, `model_dump` raised and the answer was a 500 with a traceback), and 1,000 to 100,000
(Python's JSON parser recurses and gave up: before, a 400 "There was an error parsing the body").
99 levels are accepted.
"""

from collections.abc import AsyncIterator

import httpx
import pytest

from slotflow.contracts.codec import FIELD_MAX_DEPTH
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import CLIENT_HEADERS
from tests.integration.cli.support import served

CRON = '{"spec":{"kind":"cron","expression":"*/5 * * * *"},"handler":"h.x"'


def nested_text(depth: int) -> str:
    """A JSON object ``depth`` levels deep, written out (Python's own encoder recurses)."""
    return '{"n":' * (depth - 1) + '{"leaf":1}' + "}" * (depth - 1)


def bodies(depth: int) -> list[tuple[str, str, str]]:
    """(path, JSON body, the field a refusal names) for each place a value nests."""
    value = nested_text(depth)
    return [
        (
            "/v1/schedules",
            f'{{"schedule_id":"deep-{depth}","definition":{CRON},"payload":{value}}}}}',
            "definition.payload",
        ),
        ("/v1/workflows", f'{{"workflow_id":"deep-{depth}","workflow_type":"t.x","input":{value}}}', "input"),
        ("/v1/workflows/deep-1/signal", f'{{"signal":"s","payload":{value}}}', "payload"),
    ]


@pytest.fixture
async def http(api_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        served(create_app(api_settings)) as url,
        httpx.AsyncClient(base_url=url, headers=CLIENT_HEADERS, timeout=40) as client,
    ):
        yield client


async def test_past_the_limit_is_a_422_naming_the_field_at_every_depth(http: httpx.AsyncClient) -> None:
    for depth in (FIELD_MAX_DEPTH + 1, 200, 254, 255, 256, 300, 1000, 5000, 100_000):
        for path, body, field in bodies(depth):
            response = await http.post(path, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 422, (depth, path, response.status_code, response.text[:300])
            detail = response.json()["detail"]
            assert detail.startswith((f"{field}:", f"{field}.")), (depth, detail)
            assert "levels deep" in detail or "nested too deep" in detail, (depth, detail)


async def test_at_the_limit_is_accepted(http: httpx.AsyncClient) -> None:
    for path, body, _ in bodies(FIELD_MAX_DEPTH):
        response = await http.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 202, (path, response.text[:300])
