"""A body is read as a person writes it, and a bad one is answered in the person's words.

`15m` is a duration over HTTP as on the command line, a spec without `kind` is the kind its one
field implies (the OpenAPI gives each spec's `kind` a default), and a 422 names the field as the
user wrote it and says what is wrong without the validation library's vocabulary. Against the
api on the real broker: what is accepted is read back from the commands topic.
"""

import httpx
import pytest

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.settings import KafkaSettings
from tests.integration.api.helpers import read_topic


async def test_short_durations_and_implied_spec_kinds_are_accepted(
    client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    bodies = [
        {
            "schedule_id": "every-15m",
            "definition": {
                "spec": {"every": "15m"},
                "handler": "reports.build",
                "retry": {"base": "250ms", "cap": "1h30m"},
                "misfire": {"grace": "90"},
                "jitter": "5s",
            },
        },
        {
            "schedule_id": "nightly",
            "definition": {"spec": {"expression": "0 2 * * *"}, "handler": "reports.build"},
        },
        {
            "schedule_id": "one-off",
            "definition": {"spec": {"at": "2030-01-01T00:00:00Z"}, "handler": "reports.build"},
        },
    ]
    for body in bodies:
        answer = await client.post("/v1/schedules", json=body)
        assert answer.status_code == 202, answer.text
    published = {e.key: e.data["definition"] for e in await read_topic(kafka, SCHEDULE_COMMANDS, want=3)}
    every = published["every-15m"]
    assert every["spec"]["kind"] == "interval"
    assert every["spec"]["every"] == "PT15M"
    assert (every["retry"]["base"], every["retry"]["cap"]) == ("PT0.25S", "PT1H30M")
    assert every["misfire"]["grace"] == "PT1M30S"
    assert every["jitter"] == "PT5S"
    assert published["nightly"]["spec"] == {"kind": "cron", "expression": "0 2 * * *", "timezone": "UTC"}
    assert published["one-off"]["spec"]["kind"] == "once"


DEFINITION = {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "reports.build"}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (
            {"schedule_id": "s", "spec": {"kind": "interval", "every": "PT1H"}, "handler": "h"},
            "definition: is required; spec: is not a field here; handler: is not a field here; put spec, "
            'handler and the policies inside "definition" (docs/api.md has one example per command)',
        ),
        (
            {"schedule_id": "s", "definition": {**DEFINITION, "spec": {"every": "fortnightly"}}},
            "definition.spec.every: is not a duration; use ISO 8601 (PT15M, PT1H30M), a number of "
            "seconds, or 15m, 1h30m, 250ms",
        ),
        (
            {"schedule_id": "s", "definition": {**DEFINITION, "spec": {"timezone": "UTC"}}},
            "definition.spec: needs a kind: cron (with expression), interval (with every) or once (with at)",
        ),
        (
            {"schedule_id": "s", "definition": {**DEFINITION, "retry": {"max_attempts": -1}}},
            "definition.retry.max_attempts: must be at least 0",
        ),
        (
            {"schedule_id": "s", "definition": {**DEFINITION, "overlap": "queue"}},
            "definition.overlap: must be one of allow, skip, buffer_one, buffer_all, cancel_previous",
        ),
        (
            {"schedule_id": "s", "definition": {**DEFINITION, "start_at": "2030-01-01T00:00:00"}},
            "definition.start_at: has no UTC offset (time zone); add one, e.g. 2026-12-02T02:00:00Z",
        ),
        (
            {"schedule_id": "s", "definition": {"spec": {"kind": "interval", "every": "PT1H"}}},
            "definition.handler: is required",
        ),
    ],
)
async def test_a_bad_body_is_answered_in_plain_words(
    client: httpx.AsyncClient, body: dict[str, object], detail: str
) -> None:
    answer = await client.post("/v1/schedules", json=body)
    assert answer.status_code == 422
    assert answer.json()["detail"] == detail


async def test_bad_query_parameters_are_answered_in_plain_words(client: httpx.AsyncClient) -> None:
    states = await client.get("/v1/runs", params={"state": "bogus"})
    assert states.json()["detail"] == (
        "state: must be one of due, running, failed, retrying, held, completed, dead_lettered, skipped"
    )
    limit = await client.get("/v1/schedules", params={"limit": "ten"})
    assert limit.json()["detail"] == "limit: must be a whole number"
    too_many = await client.get("/v1/schedules", params={"limit": 501})
    assert too_many.json()["detail"] == "limit: must be at most 500"
