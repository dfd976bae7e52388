"""A catalogue of bad inputs for any consumer topic, each with the DLQ reason it must be parked with;
the same cases as HTTP requests (`bad_requests`), and handlers that misbehave (`bad_handlers`).

Build it from one good envelope of the topic (the template every mutation starts from). Entries
whose `reason` is None are valid messages with hostile content (quotes, SQL fragments): the
consumer must process them harmlessly, never park them and never break.
"""

import asyncio
import json
import time
from collections.abc import Callable
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
from slotflow.runs import RunContext

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


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def _payload_entries(base: dict[str, Any], key: bytes, tag: str) -> list[BadInput]:
    """Cases inside the data: nesting the consumers' JSON parser cannot take, a NUL in a payload."""
    entries: list[BadInput] = []
    deep = {**base, "id": f"{base['id']}/deep{tag}", "data": {**base["data"], "deep": _nested(200)}}
    # The api's issue case: 202 accepted, then every consumer parked it ("recursion limit
    # exceeded"). The api now refuses it (a value nests at most FIELD_MAX_DEPTH levels); a record
    # that arrives anyway is poison.
    entries.append(BadInput("payload_nested_200_deep", key, _dump(deep), "undecodable"))
    data = base["data"]
    holder = data if isinstance(data.get("payload"), dict) else data.get("definition")
    if isinstance(holder, dict) and isinstance(holder.get("payload"), dict):
        raw = json.loads(json.dumps(base))
        target = raw["data"] if holder is data else raw["data"]["definition"]
        target["payload"] = {**target["payload"], "note": "nul \u0000 inside"}
        if raw.get("type") != "job.due":
            raw["id"] = f"{base['id']}/nul-payload{tag}"
        # A JobDue's id follows from its run (issue 24: any other id is parked as forged), so
        # that case keeps the good record's id: a duplicate of it, collapsed onto the same run.
        # Valid JSON, but PostgreSQL's text and jsonb cannot hold the NUL: every consumer refuses
        # it at decode, naming the field (the acceptance rule, slotflow.contracts.acceptance).
        entries.append(BadInput("nul_in_payload", key, _dump(raw), "invalid_payload"))
    return entries


def full_catalogue(good: Envelope, *, tag: str = "") -> list[BadInput]:
    """`catalogue` plus the cases inside a message's data (nesting, a NUL in a payload)."""
    return [*catalogue(good, tag=tag), *_payload_entries(_raw(good), good.key.encode(), tag)]


# -- bad requests: the same cases at the api's edge -------------------------------------------

MIB = 1024 * 1024
_DEFINITION: dict[str, Any] = {"spec": {"kind": "cron", "expression": "*/5 * * * *"}, "handler": "h.x"}


@dataclass(frozen=True, slots=True)
class BadRequest:
    """One HTTP request a careless or hostile client sends, and the answer it must get."""

    name: str
    method: str
    path: str
    status: int
    #: A fragment the error's `detail` must contain (in a person's words).
    detail: str
    json: Any = None
    params: dict[str, str] | None = None
    #: A body of this many bytes instead of `json` (too big to build here; the test streams it).
    body_bytes: int = 0


def bad_requests() -> list[BadRequest]:
    """Every bad request of the catalogue; sizes above a few MiB are left to process-level tests.

    Left to tests with a ticker and a claimer, since they need state first: a backfill wider than
    `SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS` (409 with ?wait=, tests/integration/ticker/test_commands.py)
    and one more backfill than `SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT` (409,
    tests/integration/claimer/test_backfill.py).
    """

    def schedule(name: str, **definition: Any) -> dict[str, Any]:
        return {"schedule_id": name, "definition": {**_DEFINITION, **definition}}

    return [
        BadRequest(
            "body_300_mb", "POST", "/v1/schedules", 413, "request body too large", body_bytes=300 * MIB
        ),
        BadRequest("body_10_mb", "POST", "/v1/schedules", 413, "request body too large", body_bytes=10 * MIB),
        BadRequest(
            "nul_in_payload",
            "POST",
            "/v1/schedules",
            422,
            "definition.payload.note: contains a NUL character",
            json=schedule("nul-payload", payload={"note": "a\u0000b"}),
        ),
        BadRequest(
            "nul_in_tag",
            "POST",
            "/v1/schedules",
            422,
            "definition.tags.0: contains a NUL character",
            json=schedule("nul-tag", tags=["b\u0000d"]),
        ),
        BadRequest(
            "nul_in_query_filter",
            "GET",
            "/v1/runs",
            422,
            "query parameter 'job_id': contains a NUL character",
            params={"job_id": "a\u0000b"},
        ),
        BadRequest(
            "payload_nested_200_deep",
            "POST",
            "/v1/schedules",
            422,
            "levels deep; the limit is",
            json=schedule("deep", payload=_nested(200)),
        ),
        BadRequest(
            "payload_900_kb",
            "POST",
            "/v1/schedules",
            422,
            "the limit per schedule is",
            json=schedule("big", payload={"blob": "a" * 900_000}),
        ),
    ]


# -- bad handlers: code a claimer runs that tries to take it down --------------------------------


class Meltdown(BaseException):
    """Not an Exception: what `except Exception` around a handler used to miss."""


@dataclass(frozen=True, slots=True)
class BadHandler:
    """A handler, and what must become of a run of it (with one attempt allowed)."""

    name: str
    fn: Callable[[RunContext], Any]
    state: str
    error_type: str | None


async def _system_exit(ctx: RunContext) -> None:
    raise SystemExit(f"handler gave up on {ctx.run_id}")


async def _keyboard_interrupt(ctx: RunContext) -> None:
    raise KeyboardInterrupt


async def _meltdown(ctx: RunContext) -> None:
    raise Meltdown("core temperature exceeded")


async def _cancels_itself(ctx: RunContext) -> None:
    raise asyncio.CancelledError("a library cancelled something of its own")


def _blocks(ctx: RunContext) -> str:
    time.sleep(0.5)  # a plain def: it runs in the claimer's thread pool, not on its loop
    return "done"


async def _deep_result(ctx: RunContext) -> dict[str, Any]:
    return _nested(200)  # no consumer could decode it: recorded as a truncation marker


def bad_handlers() -> list[BadHandler]:
    """Handlers that must each end as a recorded run, with the claimer still up.

    Left to process-level tests: a handler that ends its process (`os._exit`; quarantined after
    `max_lease_lapses`) and an `async def` that blocks the loop (named by the watchdog).
    """
    return [
        BadHandler("bad.system_exit", _system_exit, "dead_lettered", "SystemExit"),
        BadHandler("bad.keyboard_interrupt", _keyboard_interrupt, "dead_lettered", "KeyboardInterrupt"),
        BadHandler("bad.base_exception", _meltdown, "dead_lettered", "Meltdown"),
        BadHandler("bad.cancelled_error", _cancels_itself, "dead_lettered", "CancelledError"),
        BadHandler("bad.blocking_plain_def", _blocks, "completed", None),
        BadHandler("bad.result_nested_200_deep", _deep_result, "completed", None),
    ]


# -- hostile values: what every service must decide alike (the acceptance rule) ------------------


def _spread(first: int, count: int) -> str:
    """``count`` characters varied over the 26 (ASCII) or 4000 code points from ``first``: text
    PostgreSQL cannot compress below an index entry's limit, as a run of one character it can."""
    width = 26 if first < 0x80 else 4000
    return "".join(chr(first + (i * 7919) % width) for i in range(count))


@dataclass(frozen=True, slots=True)
class HostileValue:
    """One value that has broken something somewhere, and where it belongs (`text`, `id`,
    `json`, `instant`)."""

    name: str
    kind: str
    value: Any


def hostile_values() -> list[HostileValue]:
    """Values at and past every limit of `slotflow.contracts.acceptance`, and ids with `/`, `%`,
    unicode and whitespace: the fixed sample every suite runs (the property tests generate more)."""
    return [
        HostileValue("nul_in_text", "text", "a\x00b"),
        HostileValue("escaped_nul_as_text", "text", "\\u0000"),
        HostileValue("slash", "id", "orders/eu/1042/child/2"),
        HostileValue("percent", "id", "a%2Fb"),
        HostileValue("space", "id", "a b"),
        HostileValue("unicode", "id", "zahlung-ä-字"),
        HostileValue("id_1000_bytes", "id", _spread(0x61, 1000)),
        HostileValue("id_1001_bytes", "id", _spread(0x61, 999) + "é"),
        HostileValue("cjk_1002_bytes", "id", _spread(0x4E00, 334)),
        HostileValue("emoji_1200_bytes", "id", _spread(0x1F300, 300)),
        HostileValue("ascii_401_chars", "id", _spread(0x61, 401)),
        HostileValue("nul_in_key", "json", {"k\x00": 1}),
        HostileValue("nul_in_value", "json", {"note": "nul \x00 inside"}),
        HostileValue("depth_99", "json", _nested(99)),
        HostileValue("depth_100", "json", _nested(100)),
        HostileValue("depth_199", "json", _nested(199)),
        HostileValue("nan", "json", {"amount": float("nan")}),
        HostileValue("infinity", "json", {"amount": float("inf")}),
        HostileValue("year_0_in_utc", "instant", "0001-01-01T00:00:00+14:00"),
        HostileValue("year_10000_in_utc", "instant", "9999-12-31T23:59:59-14:00"),
        HostileValue("first_day_in_utc", "instant", "0001-01-02T00:00:00Z"),
    ]
