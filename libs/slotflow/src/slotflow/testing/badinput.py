"""A catalogue of bad inputs for any consumer topic, each with the DLQ reason it must be parked with.

Build it from one good envelope of the topic (the template every mutation starts from). Entries
whose `reason` is None are valid messages with hostile content (quotes, SQL fragments): the
consumer must process them harmlessly, never park them and never break.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slotflow.contracts import (
    REGISTRY,
    CreateSchedule,
    CronSpec,
    Envelope,
    ScheduleDefinition,
    ScheduleDeleted,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.kafka.poison import expected_key

TWO_MIB = 2 * 1024 * 1024
SQL_FRAGMENT = "x'); DROP TABLE runs; --"
QUOTED_NAME = 'Robert\'); DROP TABLE "jobs";--'
_AT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class BadInput:
    """One record to produce, and what must become of it."""

    name: str
    key: bytes | None
    value: bytes | None
    #: The DLQ reason it must be parked with; None when it is valid and must simply be processed.
    reason: str | None
    headers: tuple[tuple[str, bytes], ...] = ()


def _raw(envelope: Envelope) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(encode(envelope))
    return loaded


def _dump(raw: dict[str, Any]) -> bytes:
    return json.dumps(raw).encode()


def _create_schedule(schedule_id: str, expression: str) -> dict[str, Any]:
    definition = ScheduleDefinition(spec=CronSpec(expression="0 2 * * *"), handler="bad.input")
    good = wrap(
        CreateSchedule(schedule_id="placeholder", definition=definition),
        id=f"bad-{schedule_id[:40]}",
        key=schedule_id,
        source="badinput",
        occurred_at=_AT,
    )
    raw = _raw(good)
    raw["data"]["schedule_id"] = schedule_id
    raw["data"]["definition"]["spec"]["expression"] = expression
    return raw


def catalogue(good: Envelope, *, tag: str = "") -> list[BadInput]:
    """The bad-input catalogue for a topic whose consumer accepts ``good``'s type.

    ``tag`` is appended to ids so that several runs of the catalogue stay distinct.
    """
    model = REGISTRY.model_for(good.type, good.version)
    message = REGISTRY.parse(good)
    key = good.key.encode()
    encoded = encode(good)
    base = _raw(good)
    required = [name for name, info in model.model_fields.items() if info.is_required()]
    text_fields = [name for name, value in base["data"].items() if isinstance(value, str)]
    entries: list[BadInput] = []

    def mutated(
        name: str, reason: str | None, change: dict[str, Any], *, data: dict[str, Any] | None = None
    ) -> None:
        raw = {**base, "id": f"{base['id']}/{name}{tag}", **change}
        if data is not None:
            raw["data"] = data
        entries.append(BadInput(name, key, _dump(raw), reason))

    entries.append(BadInput("truncated_json", key, encoded[: len(encoded) // 2], "undecodable"))
    entries.append(BadInput("non_utf8_bytes", key, b"\xff\xfe\x00\xc3\x28" + encoded[5:], "undecodable"))
    entries.append(BadInput("empty_value", key, b"", "undecodable"))
    entries.append(BadInput("json_not_an_envelope", key, b"[1, 2, 3]", "undecodable"))
    entries.append(BadInput("deeply_nested_json", key, b"[" * 50_000 + b"]" * 50_000, "undecodable"))
    if text_fields:
        broken = {**base["data"], text_fields[0]: {"not": ["a", "string"]}}
        mutated("wrong_field_type", "invalid_payload", {}, data=broken)
    if required:
        missing = {k: v for k, v in base["data"].items() if k != required[0]}
        mutated("missing_field", "invalid_payload", {}, data=missing)
    mutated("unknown_version", "unknown_type", {"version": good.version + 98})
    mutated("unknown_type", "unknown_type", {"type": "no.such.message"})
    other = wrap(
        ScheduleDeleted(schedule_id="other"), id=f"other{tag}", key=good.key, source="b", occurred_at=_AT
    )
    if not isinstance(message, ScheduleDeleted):
        entries.append(BadInput("wrong_message_type", key, encode(other), "unexpected_type"))
    padded = {**base["data"], "padding": "x" * TWO_MIB}
    mutated("two_mib_message", "too_large", {}, data=padded)
    cron = _create_schedule("bad-cron", "61 * * * *")
    cron["id"] = f"bad-cron{tag}"
    entries.append(BadInput("invalid_cron", b"bad-cron", _dump(cron), "invalid_payload"))
    entries.append(BadInput("record_key_differs", b"someone-else", encoded, "key_mismatch"))
    wanted = expected_key(good, message)
    if wanted is not None:
        moved = {**base, "id": f"{base['id']}/moved{tag}", "key": f"{wanted}-elsewhere"}
        entries.append(
            BadInput(
                "key_differs_from_payload_id", f"{wanted}-elsewhere".encode(), _dump(moved), "key_mismatch"
            )
        )
    quoted = _create_schedule(QUOTED_NAME, "0 2 * * *")
    quoted["id"] = f"quoted{tag}"
    entries.append(BadInput("quotes_in_name", QUOTED_NAME.encode(), _dump(quoted), "invalid_payload"))
    sql = _create_schedule(SQL_FRAGMENT, "0 2 * * *")
    sql["id"] = f"sql{tag}"
    entries.append(BadInput("sql_fragment_in_name", SQL_FRAGMENT.encode(), _dump(sql), "invalid_payload"))
    nul = _create_schedule("nul\u0000byte", "0 2 * * *")
    nul["id"] = f"nul{tag}"
    entries.append(BadInput("nul_byte_in_name", b"nul\x00byte", _dump(nul), "invalid_payload"))
    return entries
