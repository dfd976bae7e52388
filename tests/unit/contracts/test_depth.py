"""One nesting limit for producers and consumers: what `check_depth` lets through decodes."""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import REGISTRY, CreateSchedule, ScheduleDefinition
from slotflow.contracts.codec import MAX_DEPTH, check_depth, decode, depth_of, encode
from slotflow.contracts.envelope import wrap
from slotflow.errors import NestingTooDeep, PoisonMessage


def nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def command(payload: dict[str, object]) -> CreateSchedule:
    definition = ScheduleDefinition.model_validate(
        {"spec": {"kind": "cron", "expression": "* * * * *"}, "handler": "h.x", "payload": payload}
    )
    return CreateSchedule(schedule_id="s", definition=definition)


def test_depth_of_counts_containers() -> None:
    assert depth_of(1) == 0
    assert depth_of({}) == 1
    assert depth_of([[], {"a": [1]}]) == 3
    assert depth_of(nested(5000)) == 5000  # iterative: no recursion limit of its own


def test_the_deepest_message_allowed_decodes_in_a_consumer() -> None:
    message = command(nested(MAX_DEPTH - 2))
    data = message.model_dump(mode="json")
    check_depth(data)
    assert depth_of(data) == MAX_DEPTH
    envelope = wrap(message, id="c1", key="s", source="test", occurred_at=datetime.now(UTC))
    decoded = REGISTRY.parse(decode(encode(envelope)))
    assert decoded == message


def test_deeper_is_refused_here_and_would_be_poison_there() -> None:
    message = command(nested(200))
    with pytest.raises(NestingTooDeep, match="nested 202 levels deep; the limit is 100"):
        check_depth(message.model_dump(mode="json"))
    envelope = wrap(message, id="c2", key="s", source="test", occurred_at=datetime.now(UTC))
    with pytest.raises(PoisonMessage):
        REGISTRY.parse(decode(encode(envelope)))
