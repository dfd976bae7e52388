"""The docs' examples work as written: every run id a page or a docstring shows is one the api
finds, on the real broker and database (docs/client.md once showed `get_run("...+00:00")`, which
answered 404: run ids name their slot in UTC with a Z)."""

import re
from datetime import datetime
from pathlib import Path

import httpx

from slotflow.client import Client, NotFound
from slotflow.client._http import HttpTransport
from slotflow.contracts import JobDue, RunCompleted
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS
from slotflow.core.identity import run_id
from slotflow.testing import assert_eventually
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from tests.integration.api.conftest import AUTH, TEST_TOKEN, Emitter
from tests.integration.cli.support import served

REPO = Path(__file__).resolve().parents[3]
#: Where examples for client and API users live.
SOURCES = [
    REPO / "docs" / "client.md",
    REPO / "docs" / "api.md",
    REPO / "docs" / "cli.md",
    REPO / "libs" / "slotflow" / "src" / "slotflow" / "client" / "_client.py",
    REPO / "libs" / "slotflow" / "src" / "slotflow" / "client" / "_http.py",
]
#: A run id as the examples write one: `job@` and an ISO-8601 instant.
RUN_ID = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._:-]*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
)


def _documented_run_ids() -> set[str]:
    return {match for source in SOURCES for match in RUN_ID.findall(source.read_text(encoding="utf-8"))}


def test_every_documented_run_id_is_in_its_canonical_form() -> None:
    found = _documented_run_ids()
    assert found, "no run id found in the docs: the pattern is stale"
    for given in sorted(found):
        job, _, slot = given.rpartition("@")
        assert run_id(job, datetime.fromisoformat(slot)) == given, f"{given}: run ids end in Z"


async def test_the_client_docs_get_run_example_finds_its_run(api_settings: Settings, emit: Emitter) -> None:
    block = (REPO / "docs" / "client.md").read_text(encoding="utf-8")
    (documented,) = re.findall(r'client\.get_run\("([^"]+)"\)', block)
    job, _, slot_text = documented.rpartition("@")
    slot = datetime.fromisoformat(slot_text)
    due = JobDue(run_id=documented, job_id=job, slot=slot, handler="payouts.pay_merchants")
    await emit(JOBS_DUE, due, id=documented, key=job)
    done = RunCompleted(
        run_id=documented,
        job_id=job,
        slot=slot,
        attempt=1,
        fence_token=1,
        owner="c1",
        started_at=slot,
        finished_at=slot,
        result={"paid": 12},
    )
    await emit(RUN_EVENTS, done, id=f"{documented}/1/completed", key=job)
    async with served(create_app(api_settings)) as base:
        async with HttpTransport(base, token=TEST_TOKEN) as http:
            client = Client(http)

            async def completed() -> bool:
                try:
                    return (await client.get_run(documented)).state == "completed"
                except NotFound:
                    return False  # not projected yet

            await assert_eventually(completed, timeout=20, message=f"run {documented} as the docs read it")
        # The other spelling of the same instant names no run; the 404 says which id does.
        async with httpx.AsyncClient(base_url=base, headers={"X-Slotflow-Client": "test", **AUTH}) as api:
            other = documented.replace("Z", "+00:00")
            answer = await api.get(f"/v1/runs/{other}")
            assert answer.status_code == 404
            assert f"did you mean {documented!r}" in answer.json()["detail"]
