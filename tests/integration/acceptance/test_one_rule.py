"""One acceptance rule: what one service accepts, every service that stores it can store.

Generated hostile values (a NUL anywhere in strings and keys, nesting at and past the limit,
numbers JSON has not, sizes at and past the limits, ids with `/`, `%`, unicode and whitespace) go
into commands, JobDues and dead letters, and each record goes through every consumer of its topic
on the real PostgreSQL (tests/integration/acceptance/pipeline.py): the ticker's command intake,
the api's projection, the orchestrator's intake and decision, the claimer's JobDue intake, the
dlq's letter store; then whatever each of them staged goes to the consumers of its topic. Every
consumer of a record must decide alike (all refuse it, naming the field, or all take it), every
one that takes it must store it, and nothing a service emits may be refused by its consumers.

Before the rule, among others: the ticker took a CreateSchedule whose payload held a NUL (its
`json` column keeps the escape) and fired it, while the api's `jsonb` could not store the schedule
and parked its ScheduleCreated; a workflow started with a NUL input ran while the api parked its
start; `NaN` in a payload was stored as null by the ticker and refused by the api; a command id of
334 CJK characters broke the ticker's inbox index.
"""

import json
import os
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from slotflow.contracts import StartWorkflow, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import WORKFLOW_COMMANDS
from slotflow.errors import PoisonMessage
from slotflow.kafka.poison import decode_record
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.workflow_code import load_workflow_code
from tests.integration.acceptance.cases import (
    AT,
    BUILDERS,
    Hostile,
    hostile_records,
    key_bytes,
    record_bytes,
    spread,
)
from tests.integration.acceptance.pipeline import Outcome, Pipeline

EXAMPLES = int(os.environ.get("SLOTFLOW_TEST_ACCEPTANCE_EXAMPLES", "150"))
#: How a refusal may name a field: the envelope's id for a command id, and a JobDue's run id
#: follows from its job id (the first field the check meets).
FIELD_NAMES = {
    "command_id": ("id",),
    "job_id": ("job_id", "run_id"),
    # A dead letter's id is its origin, `{topic}:{partition}:{offset}`.
    "topic": ("topic", "dead letter id"),
}


@pytest.fixture
async def pipeline(pg_pool: Pool) -> Pipeline:
    # Topic names only: the pipeline hands records to the consumers' store paths directly.
    kafka = KafkaSettings(topic_namespace="acceptance")
    started = Pipeline(pg_pool, kafka, load_workflow_code(["tests.integration.acceptance.flows"]))
    await started.start()
    return started


_counter = iter(range(10**9))


async def _run(pipeline: Pipeline, case: Hostile) -> list[Outcome]:
    await pipeline.reset()
    n = next(_counter)
    if case.kind in ("signal_workflow", "cancel_workflow"):
        # The workflow the signal or cancel is for exists and waits (a good start first).
        start = StartWorkflow(workflow_id=f"w-{n}", workflow_type="acceptance.carry", input={"n": n})
        envelope = wrap(start, id=f"start-{n}", key=f"w-{n}", source="acceptance", occurred_at=AT)
        record = pipeline.record(WORKFLOW_COMMANDS, encode(envelope), key=envelope.key.encode())
        await pipeline.deliver(WORKFLOW_COMMANDS, record)
    spec, raw = BUILDERS[case.kind](case, n)
    before = len(pipeline.outcomes)
    record = pipeline.record(spec, record_bytes(raw), key=key_bytes(raw))
    await pipeline.deliver(spec, record)
    return pipeline.outcomes[before:]


def _judge(case: Hostile, outcomes: list[Outcome]) -> None:
    shown = "\n".join(f"  {o}" for o in outcomes)
    context = f"{case.describe()}\n{shown}"
    failed = [o for o in outcomes if o.error is not None]
    assert not failed, f"a consumer took a record and could not store it:\n{context}"
    first = [o for o in outcomes if not o.emitted]
    assert len({o.refused is None for o in first}) == 1, f"the consumers of one record disagree:\n{context}"
    refused_emitted = [o for o in outcomes if o.emitted and o.refused is not None]
    assert not refused_emitted, f"a service emitted what its consumers refuse:\n{context}"
    names = FIELD_NAMES.get(case.field, (case.field,))
    for outcome in first:
        if outcome.refused is not None and outcome.refused.startswith("invalid_payload"):
            # The refusal names the field it is about, as the sender wrote it.
            assert any(n in outcome.refused for n in names), f"the refusal names none of {names}:\n{context}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    # No explain phase: it prints every draw behind a failing case, 100 kB for a deep value.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
@given(case=hostile_records)
async def test_every_consumer_decides_alike_and_stores_what_it_takes(
    pipeline: Pipeline, case: Hostile
) -> None:
    _judge(case, await _run(pipeline, case))


@pytest.mark.parametrize(
    "case",
    [
        Hostile("create_schedule", "payload", {"note": "a\x00b"}),
        Hostile("create_schedule", "payload", {"amount": float("nan")}),
        Hostile("create_schedule", "command_id", spread(0x4E00, 1000)),
        Hostile("start_workflow", "input", {"note": "a\x00b"}),
        Hostile("signal_workflow", "payload", {"k\x00": 1}),
        Hostile("job_due", "payload", {"note": "a\x00b"}),
        Hostile("dead_letter", "reason", spread(0x4E00, 1000)),
        # The ticker's rejection echoed a command id with a newline; the api refused the rejection.
        Hostile("create_schedule", "command_id", "\n\n\n"),
        # The dlq's status event id (`{letter id}/parked`) went past the id limit: every park failed.
        Hostile("dead_letter", "topic", spread(0x61, 990)),
        # The redrive's fields, typed by the rule at the merge: a sequence past its column, a
        # letter's workflow past an index entry.
        Hostile("retry_activity", "sequence", 2**31),
        Hostile("dead_letter", "workflow_id", spread(0x4E00, 1000)),
    ],
    ids=lambda case: f"{case.kind}-{case.field}",
)
async def test_the_findings(pipeline: Pipeline, case: Hostile) -> None:
    """Each finding as a fixed case, so a regression names itself."""
    _judge(case, await _run(pipeline, case))


#: The record kinds a request of the api turns into, and the fields a request body carries (a
#: command id and a principal come from the api itself, not from the body).
HTTP_KINDS = frozenset(
    {"create_schedule", "pause_schedule", "start_workflow", "signal_workflow", "cancel_workflow"}
)
http_records = hostile_records.filter(
    lambda c: c.kind in HTTP_KINDS and c.field not in ("command_id", "principal")
)


def http_request(case: Hostile, raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The path and JSON body that ask the api for the command ``raw`` holds."""
    data = raw["data"]
    if case.kind == "create_schedule":
        return "/v1/schedules", {"schedule_id": data["schedule_id"], "definition": data["definition"]}
    if case.kind == "pause_schedule":
        return f"/v1/schedules/{data['schedule_id']}/pause", {"reason": data["reason"]}
    if case.kind == "start_workflow":
        keys = ("workflow_id", "workflow_type", "input")
        return "/v1/workflows", {k: data[k] for k in keys}
    verb = "signal" if case.kind == "signal_workflow" else "cancel"
    body = (
        {"signal": data["signal"], "payload": data["payload"]}
        if verb == "signal"
        else {"reason": data["reason"]}
    )
    return f"/v1/workflows/{quote(data['workflow_id'], safe='')}/{verb}", body


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
@given(case=http_records)
# Found by it: pydantic-core writes a lone surrogate key inside a model as U+FFFD, so the api took
# it with a 202 and published a record no consumer could read.
@example(case=Hostile("create_schedule", "payload", {"\ud800": None}))
async def test_the_api_answers_as_its_consumers_decide(client: httpx.AsyncClient, case: Hostile) -> None:
    # The same values through the api's routes: a 422 naming the field exactly when the consumers
    # of the command refuse it, a 202 (published) when they take it, never a 5xx.
    spec, raw = BUILDERS[case.kind](case, next(_counter))
    try:
        decode_record(Record(spec.name, 0, 0, key_bytes(raw), record_bytes(raw), (), None))
    except PoisonMessage as poison:
        refused: str | None = str(poison)
    else:
        refused = None
    path, body = http_request(case, raw)
    response = await client.post(
        path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"}
    )
    shown = f"{case.describe()}: {response.status_code} {response.text[:300]} (consumers: {refused})"
    assert response.status_code in (202, 422), shown
    assert (response.status_code == 422) == (refused is not None), shown
    if refused is not None:
        names = FIELD_NAMES.get(case.field, (case.field,))
        assert any(n in response.json()["detail"] for n in names), shown


def test_the_strategies_reach_every_kind() -> None:
    kinds = {
        "create_schedule",
        "pause_schedule",
        "start_workflow",
        "signal_workflow",
        "cancel_workflow",
        "retry_activity",
        "job_due",
        "dead_letter",
        "redrive_outcome",
    }
    assert set(BUILDERS) == kinds
    seen: set[str] = set()

    # Derandomized: a coverage check must not depend on the run's seed. With a random one, a run
    # of the suite drew 300 records without a pause_schedule (hypothesis spends many examples near
    # the simplest choices, so the branches are not drawn evenly).
    @settings(max_examples=300, database=None, derandomize=True)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        seen.add(data.draw(hostile_records).kind)

    draw()
    assert seen == kinds
