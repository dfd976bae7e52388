"""The acceptance rule in the message models: what it refuses, in which words, and what it lets by."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from slotflow.contracts import (
    REGISTRY,
    CreateSchedule,
    DeadLettered,
    Envelope,
    JobDue,
    RunStarted,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    wrap,
)
from slotflow.contracts.acceptance import STORED, check_value, refusal
from slotflow.contracts.codec import decode, encode
from slotflow.errors import InvalidPayload, NestingTooDeep, UndecodableMessage, UnstorableValue

AT = datetime(2026, 1, 1, tzinfo=UTC)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def refused(build: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        build()
    (error,) = caught.value.errors(include_url=False)
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def schedule(**definition: Any) -> CreateSchedule:
    spec = {"spec": {"kind": "cron", "expression": "* * * * *"}, "handler": "h.x", **definition}
    return CreateSchedule(schedule_id="s", definition=ScheduleDefinition.model_validate(spec))


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (
            lambda: schedule(payload={"note": "a\x00b"}),
            "definition.payload.note: contains a NUL character (U+0000)",
        ),
        (lambda: schedule(payload={"k\x00": 1}), "definition.payload.k\\x00: contains a NUL character"),
        (lambda: schedule(tags=("ok", "b\x00d")), "definition.tags.1: contains a NUL character"),
        (lambda: schedule(payload={"s": "\ud800"}), "definition.payload.s: contains a lone surrogate"),
        # Inside a model pydantic-core writes a lone surrogate key as U+FFFD, silently: a 202 and a
        # record no consumer could read, until the rule looked for that too.
        (lambda: schedule(payload={"\ud800": None}), "definition.payload.\\ud800: contains a lone surrogate"),
        (
            lambda: schedule(payload={"x": [float("nan")]}),
            "definition.payload.x.0: holds nan, which is not a JSON number",
        ),
        (
            lambda: schedule(payload=nested(100)),
            "definition.payload: is nested 100 levels deep; the limit is 99",
        ),
        (
            lambda: schedule(payload=nested(5000)),
            "definition.payload: is nested 5000 levels deep; the limit is 99",
        ),
        (
            lambda: schedule(start_at=datetime.fromisoformat("0001-01-01T00:00:00+14:00")),
            "definition.start_at: 0001-01-01T00:00:00+14:00 is not within the years 1 to 9999 in UTC",
        ),
        (
            lambda: SignalWorkflow(workflow_id="w", signal="s", payload={"a": float("inf")}),
            "payload.a: holds inf",
        ),
        (
            lambda: StartWorkflow(workflow_id="w", workflow_type="t", input={"a": {"b": "x\x00"}}),
            "input.a.b: contains a NUL character",
        ),
    ],
)
def test_what_no_service_could_store_is_refused_naming_the_field(build: Any, words: str) -> None:
    assert words in refused(build)


def test_at_the_limits_and_lookalikes_are_accepted() -> None:
    # Text that only looks suspicious to the byte scan: the walk clears it.
    schedule(payload={"note": "\\u0000 NaN Infinity {[{[" * 40, "when": "0001-01-01T00:00:00Z"})
    schedule(payload=nested(99))
    StartWorkflow(workflow_id="orders/eu/1042/child/2", workflow_type="t", input={"x": 1.5e308})
    JobDue(run_id="j@x", job_id="j", slot=datetime.fromisoformat("0001-01-02T00:00:00+00:00"), handler="h")


def test_ids_and_indexed_texts_fit_an_index_entry() -> None:
    cjk = "字" * 334  # 1,002 bytes
    assert "run_id" in refused(
        lambda: RunStarted(
            run_id=cjk, job_id="j", slot=AT, attempt=1, fence_token=1, owner="c", started_at=AT
        )
    )
    letter = {
        "reason": "x" * 1001,
        "error_type": "E",
        "error": "e",
        "source_service": "s",
        "topic": "t",
        "partition": 0,
        "offset": 1,
        "value_b64": "",
    }
    assert "is 1001 bytes as UTF-8" in refused(lambda: DeadLettered.model_validate(letter))
    assert "less than or equal to 2147483647" in refused(
        lambda: DeadLettered.model_validate({**letter, "reason": "r", "partition": 2**31})
    )
    with pytest.raises(ValidationError, match="id"):
        Envelope(type="t", version=1, id=cjk, key="k", occurred_at=AT, source="s", data={})


def test_a_record_from_another_producer_is_refused_at_decode_with_the_same_words() -> None:
    envelope = wrap(
        StartWorkflow(workflow_id="w", workflow_type="t"), id="c", key="w", source="kcat", occurred_at=AT
    )
    raw = json.loads(encode(envelope))
    raw["data"]["input"] = {"note": "a\x00b"}
    with pytest.raises(
        InvalidPayload, match=r"invalid workflow.start v1: input.note: contains a NUL character"
    ):
        REGISTRY.parse(decode(json.dumps(raw).encode()))
    raw["data"]["input"] = {"amount": 1e400}  # Python writes Infinity; a literal overflows the same
    text = json.dumps(raw).replace("Infinity", "1e400")
    with pytest.raises(InvalidPayload, match=r"input\.amount: holds inf"):
        REGISTRY.parse(decode(text.encode()))
    raw["principal"] = "token:a\x00b"
    with pytest.raises(UndecodableMessage, match="principal: contains a NUL"):
        decode(json.dumps(raw).encode())


def test_a_fact_read_back_from_storage_is_not_checked_again() -> None:
    # Stored before the rule (a value nested 150 deep decodes: pydantic-core's limit is 200); a
    # service replays what it stored, and only new input is held to the rule.
    data = {"workflow_id": "w", "workflow_type": "t", "input": nested(150)}
    with pytest.raises(ValidationError):
        StartWorkflow.model_validate(data)
    assert StartWorkflow.model_validate(data, context=STORED).input == nested(150)
    envelope = Envelope(
        type="workflow.start", version=1, id="c", key="w", occurred_at=AT, source="s", data=data
    )
    assert isinstance(REGISTRY.parse(envelope, stored=True), StartWorkflow)
    with pytest.raises(InvalidPayload):
        REGISTRY.parse(envelope)


def test_check_value_says_which_kind_of_refusal() -> None:
    check_value(nested(99), "the input")
    with pytest.raises(NestingTooDeep, match="the input: is nested 100 levels deep"):
        check_value(nested(100), "the input")
    with pytest.raises(UnstorableValue, match=r"the result\.a: contains a NUL"):
        check_value({"a": "\x00"}, "the result")
    with pytest.raises(UnstorableValue, match="holds nan"):
        check_value({"a": float("nan")}, "the result")


def test_refusal_of_a_valid_message_is_none() -> None:
    message = JobDue(
        run_id="j@x", job_id="j", slot=AT, handler="h", payload={"a": [1, {"b": "c"}]}, tags=("t",)
    )
    assert refusal(message) is None
