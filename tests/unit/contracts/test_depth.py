"""One nesting limit for every value a message holds: what the models let through decodes, in
every carrier, and what they refuse is refused by name on both sides."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from slotflow.contracts import (
    REGISTRY,
    CreateSchedule,
    FireJobDue,
    JobDue,
    ScheduleDefinition,
    StartTimer,
)
from slotflow.contracts.codec import FIELD_MAX_DEPTH, check_depth, decode, depth_of, encode
from slotflow.contracts.envelope import wrap
from slotflow.core.identity import run_id
from slotflow.errors import InvalidPayload, NestingTooDeep

AT = datetime(2026, 1, 1, tzinfo=UTC)


def nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def definition(payload: dict[str, object]) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"spec": {"kind": "cron", "expression": "* * * * *"}, "handler": "h.x", "payload": payload}
    )


def test_depth_of_counts_containers() -> None:
    assert depth_of(1) == 0
    assert depth_of({}) == 1
    assert depth_of([[], {"a": [1]}]) == 3
    assert depth_of(nested(5000)) == 5000  # iterative: no recursion limit of its own


def test_a_payload_at_the_limit_decodes_in_its_deepest_carrier() -> None:
    # A schedule's payload rides in CreateSchedule, in every JobDue, and in a retry's StartTimer
    # (three levels down); all of them must decode, or a retry could never be scheduled.
    payload = nested(FIELD_MAX_DEPTH)
    command = CreateSchedule(schedule_id="s", definition=definition(payload))
    slot = AT
    job = JobDue(run_id=run_id("s", slot), job_id="s", slot=slot, handler="h.x", payload=payload)
    retry = job.model_copy(update={"attempt": 2, "kind": "retry"})
    timer = StartTimer(timer_id="retry:s@x#2", fire_at=AT, on_fire=FireJobDue(job=retry))
    for message in (command, job, timer):
        envelope = wrap(message, id="c1", key="s", source="test", occurred_at=AT)
        assert REGISTRY.parse(decode(encode(envelope))) == message


def test_one_level_deeper_is_refused_by_the_model_naming_the_field() -> None:
    with pytest.raises(
        ValidationError, match=r"definition\.payload: is nested 100 levels deep; the limit is 99"
    ):
        CreateSchedule(schedule_id="s", definition=definition(nested(FIELD_MAX_DEPTH + 1)))


def test_a_deeper_record_from_another_producer_is_refused_at_decode_naming_the_field() -> None:
    good = wrap(
        CreateSchedule(schedule_id="s", definition=definition({})),
        id="c2",
        key="s",
        source="test",
        occurred_at=AT,
    )
    for depth in (FIELD_MAX_DEPTH + 1, 150):
        raw = good.model_dump(mode="json")
        raw["data"]["definition"]["payload"] = nested(depth)
        forged = good.model_validate(raw)
        with pytest.raises(InvalidPayload, match=rf"definition\.payload: is nested {depth} levels deep"):
            REGISTRY.parse(decode(encode(forged)))


def test_check_depth_refuses_a_value_past_the_limit() -> None:
    check_depth(nested(FIELD_MAX_DEPTH))
    with pytest.raises(NestingTooDeep, match="nested 100 levels deep; the limit is 99"):
        check_depth(nested(FIELD_MAX_DEPTH + 1))
