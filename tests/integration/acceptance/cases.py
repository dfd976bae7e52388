"""Generated hostile values, and the records that carry them to each consumer.

One place for both test suites: the property tests draw from the strategies here, and
`export_cases` writes a fixed sample of the same values to `hostile_cases.json`, which the stats
worker's tests read (the stats worker cannot import slotflow, decision 0005).
"""

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from slotflow.contracts import (
    CancelWorkflow,
    CreateSchedule,
    CronSpec,
    DeadLettered,
    JobDue,
    PauseSchedule,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    wrap,
)
from slotflow.contracts.acceptance import ID_MAX_BYTES, VALUE_MAX_DEPTH
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import fit_id
from slotflow.contracts.topics import (
    DLQ_MESSAGES,
    JOBS_DUE,
    SCHEDULE_COMMANDS,
    WORKFLOW_COMMANDS,
    TopicSpec,
)
from slotflow.core.identity import job_due_event_id, run_id

CASES_FILE = Path(__file__).with_name("hostile_cases.json")
AT = datetime(2026, 1, 1, tzinfo=UTC)

#: Characters that have broken something somewhere: NUL (PostgreSQL), a path separator and a
#: percent (URLs), whitespace and invisible ones, multi-byte ones (byte limits), a lone surrogate
#: (UTF-8), quotes and brackets (hand-made JSON and SQL), and the text of an escaped NUL.
HOSTILE_PIECES = (
    "\x00",
    "/",
    "%",
    "%2F",
    "%00",
    " ",
    "\t",
    "\n",
    "\u200b",
    "\ufeff",
    "é",
    "字",
    "😀",
    "\ud800",
    '"',
    "'",
    "{",
    "[",
    "\\u0000",
    "NaN",
)
hostile_text = st.lists(
    st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=6)), min_size=1, max_size=6
).map("".join)


def spread(first: int, count: int) -> str:
    """``count`` characters varied over the 26 (ASCII) or 4000 code points from ``first``: text
    PostgreSQL cannot compress below an index's limit (a run of one character it can)."""
    width = 26 if first < 0x80 else 4000
    return "".join(chr(first + (i * 7919) % width) for i in range(count))


#: Sizes at and past the limits: ids of 199 to 1001 characters of 1 to 4 bytes each.
long_text = st.builds(
    spread,
    st.sampled_from([0x61, 0xE9, 0x4E00, 0x1F300]),
    st.sampled_from([199, 200, 201, 250, 251, 333, 334, 400, 401, 999, 1000, 1001]),
)
hostile_ids = st.one_of(
    hostile_text,
    long_text,
    st.sampled_from(["a/b", "a/child/1", "x/history", "a%2Fb", "a b", " a", "a\x00b", "ä", "a\tb"]),
)


def nested(depth: int, leaf: Any = 1) -> Any:
    value: Any = {"leaf": leaf}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


#: Depths at and past the limit, and past pydantic-core's 200-level parse limit.
depths = st.sampled_from([VALUE_MAX_DEPTH - 1, VALUE_MAX_DEPTH, VALUE_MAX_DEPTH + 1, 150, 199, 200, 256, 300])
not_finite = st.sampled_from([float("nan"), float("inf"), float("-inf")])
#: Instants at the edges of the years a datetime holds: with their offsets they leave them in UTC.
edge_instants = st.sampled_from(
    [
        "0001-01-01T00:00:00+14:00",
        "0001-01-01T13:59:59+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-02T00:00:00Z",
    ]
)
json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), hostile_text, not_finite
)
json_objects = st.one_of(
    st.dictionaries(hostile_text, json_leaf, min_size=1, max_size=3),
    st.builds(nested, depths),
    st.builds(nested, depths, hostile_text),
    st.builds(lambda key, value: {key: value}, hostile_text, st.lists(json_leaf, max_size=3)),
)


class Hostile:
    """One hostile value placed in one field of one kind of record.

    A plain class with its own repr: hypothesis prints a dataclass field by field, and a value
    nested 300 deep is 100 kB of that.
    """

    __slots__ = ("field", "kind", "value")

    def __init__(self, kind: str, field: str, value: Any) -> None:
        self.kind = kind
        self.field = field
        self.value = value

    def describe(self) -> str:
        shown = repr(self.value)
        return f"{self.kind}.{self.field} = {shown[:300]}{'...' if len(shown) > 300 else ''}"

    def __repr__(self) -> str:
        return f"Hostile({self.describe()!r})"


def _raw(message: Any, *, id: str, key: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        encode(wrap(message, id=id, key=key, source="acceptance", occurred_at=AT))
    )
    return loaded


def _definition() -> ScheduleDefinition:
    return ScheduleDefinition(spec=CronSpec(expression="0 2 * * *"), handler="acceptance.pay")


def create_schedule(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    schedule_id = f"s-{n}"
    raw = _raw(
        CreateSchedule(schedule_id=schedule_id, definition=_definition()), id=f"c-{n}", key=schedule_id
    )
    if case.field == "schedule_id":
        raw["data"]["schedule_id"] = raw["key"] = case.value
    elif case.field == "command_id":
        raw["id"] = case.value
    elif case.field == "principal":
        raw["principal"] = case.value
    else:
        raw["data"]["definition"][case.field] = case.value
    return SCHEDULE_COMMANDS, raw


def pause_schedule(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    raw = _raw(PauseSchedule(schedule_id=f"s-{n}"), id=f"p-{n}", key=f"s-{n}")
    raw["data"][case.field] = case.value
    return SCHEDULE_COMMANDS, raw


def start_workflow(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    workflow_id = f"w-{n}"
    message = StartWorkflow(workflow_id=workflow_id, workflow_type="acceptance.carry", input={})
    raw = _raw(message, id=f"start-{n}", key=workflow_id)
    if case.field == "workflow_id":
        raw["data"]["workflow_id"] = raw["key"] = case.value
    else:
        raw["data"][case.field] = case.value
    return WORKFLOW_COMMANDS, raw


def signal_workflow(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    """A signal for `w-{n}`, which the test started first with a good input."""
    raw = _raw(SignalWorkflow(workflow_id=f"w-{n}", signal="note"), id=f"signal-{n}", key=f"w-{n}")
    raw["data"][case.field] = case.value
    return WORKFLOW_COMMANDS, raw


def cancel_workflow(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    raw = _raw(CancelWorkflow(workflow_id=f"w-{n}"), id=f"cancel-{n}", key=f"w-{n}")
    raw["data"][case.field] = case.value
    return WORKFLOW_COMMANDS, raw


def job_due(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    job_id = f"j-{n}"
    run = run_id(job_id, AT)
    raw = _raw(
        JobDue(run_id=run, job_id=job_id, slot=AT, handler="acceptance.pay"),
        id=job_due_event_id(run, 1),
        key=job_id,
    )
    if case.field == "job_id":
        # A run's identity follows from its job and slot: a consistent forgery, not a broken one.
        run = run_id(str(case.value), AT) if isinstance(case.value, str) else f"{case.value}@x"
        raw["data"]["job_id"] = raw["key"] = case.value
        raw["data"]["run_id"] = raw["id"] = run
    else:
        raw["data"][case.field] = case.value
    return JOBS_DUE, raw


def dead_letter(case: Hostile, n: int) -> tuple[TopicSpec, dict[str, Any]]:
    topic = f"acceptance.origin.{n}"
    letter = DeadLettered(
        reason="invalid_payload",
        error_type="InvalidPayload",
        error="refused",
        source_service="acceptance",
        topic=topic,
        partition=0,
        offset=n,
        value_b64=base64.b64encode(b"{}").decode(),
    )
    raw = _raw(letter, id=fit_id(f"{topic}:0:{n}"), key=f"{topic}:0:{n}")
    raw["data"][case.field] = case.value
    if case.field == "topic" and isinstance(case.value, str):
        raw["id"] = fit_id(f"{case.value}:0:{n}")
    return DLQ_MESSAGES, raw


Builder = Callable[[Hostile, int], tuple[TopicSpec, dict[str, Any]]]
BUILDERS: dict[str, Builder] = {
    "create_schedule": create_schedule,
    "pause_schedule": pause_schedule,
    "start_workflow": start_workflow,
    "signal_workflow": signal_workflow,
    "cancel_workflow": cancel_workflow,
    "job_due": job_due,
    "dead_letter": dead_letter,
}


def cases_of(kind: str, fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Hostile]:
    # Mapped rather than `st.builds`: hypothesis prints a failing case by its own repr then, not
    # as the call that built it (a value nested 300 deep is 100 kB of that).
    return st.one_of(*(values.map(partial(Hostile, kind, name)) for name, values in fields.items()))


text_lists = st.lists(hostile_text, min_size=1, max_size=3)
#: Every record kind, with the fields a hostile value goes into.
hostile_records = st.one_of(
    cases_of(
        "create_schedule",
        {
            "payload": json_objects,
            "tags": st.one_of(text_lists, st.lists(long_text, min_size=1, max_size=1)),
            "handler": hostile_ids,
            "schedule_id": hostile_ids,
            "command_id": hostile_ids,
            "principal": hostile_text,
            "start_at": edge_instants,
        },
    ),
    cases_of("pause_schedule", {"reason": st.one_of(hostile_text, long_text)}),
    cases_of(
        "start_workflow",
        {"input": json_objects, "workflow_id": hostile_ids, "workflow_type": hostile_ids},
    ),
    cases_of("signal_workflow", {"payload": json_objects, "signal": hostile_ids}),
    cases_of("cancel_workflow", {"reason": st.one_of(hostile_text, long_text)}),
    cases_of(
        "job_due",
        {
            "payload": json_objects,
            "tags": text_lists,
            "job_id": hostile_ids,
            "handler": hostile_ids,
            "fire_at": edge_instants,
        },
    ),
    cases_of(
        "dead_letter",
        {
            "reason": hostile_ids,
            "error": hostile_text,
            "topic": hostile_ids,
            "key": hostile_ids,
            "run_id": hostile_ids,
            "job_id": hostile_ids,
            "tags": text_lists,
        },
    ),
)


def record_bytes(raw: dict[str, Any]) -> bytes:
    """What a producer that is not slotflow writes: any JSON (`NaN` too), lone surrogates escaped."""
    return json.dumps(raw, allow_nan=True).encode()


def key_bytes(raw: dict[str, Any]) -> bytes | None:
    key = raw.get("key")
    return key.encode("utf-8", errors="surrogatepass") if isinstance(key, str) else None


def fixed_sample() -> list[dict[str, Any]]:
    """The values every suite runs, as JSON-ready text (`hostile_cases.json`): the stats worker's
    tests build their records from them."""
    values: list[Any] = [
        "a\x00b",
        {"k\x00": 1},
        {"note": "nul \x00 inside"},
        nested(VALUE_MAX_DEPTH),
        nested(VALUE_MAX_DEPTH + 1),
        nested(199),
        spread(0x4E00, ID_MAX_BYTES // 3 + 1),
        "a/b/child/1",
        "a%2Fb",
        "a b",
        "😀" * 300,
        "\\u0000",
    ]
    return [{"value": v} for v in values]


def export_cases(path: Path = CASES_FILE) -> None:
    """Write `fixed_sample` with NULs escaped as JSON does (`ensure_ascii`), so any reader gets them."""
    path.write_text(json.dumps(fixed_sample(), ensure_ascii=True, indent=1) + "\n")
