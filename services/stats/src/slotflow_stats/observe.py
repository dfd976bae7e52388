"""What one event record contributes to the statistics, decoded from the slotflow envelope.

The worker runs in its own environment without the `slotflow` library (see
docs/decisions/0005-stats-on-faust.md), so this reads the envelope's JSON directly, as a tolerant
reader: it needs `type` and a few fields of `data`, and ignores everything else. The message
types and field names are the contracts' (libs/slotflow/src/slotflow/contracts); a unit test
builds every event with those models and decodes it here, so a rename fails a test.

What every other service refuses it refuses too, so it never counts (nor stores) a record the
read model and the orchestrator never saw: the acceptance rule of `slotflow.contracts.acceptance`
is restated below for the records read here (`check_acceptable`), and
tests/unit/stats/test_acceptance.py holds it to the models' verdicts on the shared hostile records
(tests/integration/acceptance/stats_records.json).
"""

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from slotflow_stats.errors import UndecodableEvent

Family = Literal["runs", "schedules", "dlq"]

#: The types counted here: only they are held to the acceptance rule (anything else is ignored).
_COUNTED = frozenset(
    {"job.due", "slot.skipped", "dlq.status_changed", "run.started", "run.completed", "run.failed"}
    | {"run.retrying", "run.dead_lettered", "run.skipped"}
)

_RUN_COUNTER_OF = {
    "run.started": "started",
    "run.completed": "completed",
    "run.failed": "failed",
    "run.retrying": "retried",
    "run.dead_lettered": "dead_lettered",
    "run.skipped": "skipped",
}


@dataclass(frozen=True, slots=True)
class Observation:
    """One event's contribution: a counter of one subject at one instant (epoch seconds).

    `subject` is the schedule (job) id for the runs and schedules families and the original topic
    of a parked dead letter for the dlq family.
    """

    family: Family
    subject: str
    at: float
    counter: str
    duration: float | None = None
    lateness: float | None = None
    handler: str | None = None


def _instant(data: dict[str, Any], field: str) -> float:
    raw = data.get(field)
    if not isinstance(raw, str):
        raise UndecodableEvent(f"field {field!r} is missing or not a timestamp")
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError as err:
        raise UndecodableEvent(f"field {field!r} is not ISO-8601: {raw[:60]!r}") from err
    if parsed.tzinfo is None:
        raise UndecodableEvent(f"field {field!r} has no UTC offset: {raw[:60]!r}")
    try:
        # The windows are UTC: an instant in year 0 or 10000 there cannot be stored or windowed.
        parsed.astimezone(UTC)
    except OverflowError as err:
        raise UndecodableEvent(
            f"field {field!r} is not within the years 1 to 9999 in UTC: {raw[:60]!r}"
        ) from err
    return parsed.timestamp()


#: The contracts' limit on ids and keys: a subject becomes a window table's key (and its
#: changelog record's), so a longer one, which no producer of ours writes, is refused here.
SUBJECT_MAX_CHARS = 1000

# -- the acceptance rule, as `slotflow.contracts.acceptance` has it ------------------------------

#: The deepest a JSON value held in a field nests; the envelope and its data around it are two
#: more levels in every record read here (a run's result, a JobDue's payload).
VALUE_MAX_DEPTH = 99
RECORD_MAX_DEPTH = VALUE_MAX_DEPTH + 2
#: Ids (the envelope's id and key, a job id, a topic) fit a btree index entry: characters and bytes.
ID_MAX_CHARS = 1000
ID_MAX_BYTES = 1000
#: A JobDue's job id is at most this many characters (`JobDue.job_id`).
JOB_ID_MAX_CHARS = 400
#: The contracts' identifier patterns: a handler name, and a schedule id (one without `/`).
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
SCHEDULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}")
#: Characters an envelope id never holds (`slotflow.contracts.acceptance.ID_CONTROL`).
_ID_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: What in a record's bytes makes the exact walk worth it: an escaped NUL or surrogate.
_SUSPECT_ESCAPES = (
    b"\\u0000",
    b"\\ud8",
    b"\\ud9",
    b"\\uda",
    b"\\udb",
    b"\\udc",
    b"\\udd",
    b"\\ude",
    b"\\udf",
)


def _refuse_constant(name: str) -> Any:
    raise UndecodableEvent(f"record holds {name}, which is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UndecodableEvent(f"record holds {text[:40]}, which is not a finite number")
    return value


def _id_problem(text: Any, what: str, *, max_chars: int = ID_MAX_CHARS) -> str | None:
    if not isinstance(text, str):
        return f"{what} is not a string"
    if len(text) > max_chars:
        return f"{what} is longer than {max_chars} characters"
    if len(text) * 4 > ID_MAX_BYTES and len(text.encode("utf-8", errors="surrogatepass")) > ID_MAX_BYTES:
        return f"{what} is more than {ID_MAX_BYTES} bytes as UTF-8"
    return None


def check_acceptable(value: bytes, envelope: dict[str, Any]) -> None:
    """Refuse ``envelope`` (parsed from ``value``) when it breaks the acceptance rule: a NUL or a
    lone surrogate anywhere, a value nested past `VALUE_MAX_DEPTH`, an envelope id or key over
    the id limit (or an id with a control character).

    Raises:
        UndecodableEvent: it does, and every other service refuses it too.
    """
    for what, max_chars in (("id", ID_MAX_CHARS), ("key", ID_MAX_CHARS)):
        problem = _id_problem(envelope.get(what), f"envelope {what}", max_chars=max_chars)
        if problem is not None:
            raise UndecodableEvent(problem)
    if _ID_CONTROL.search(envelope["id"]) or not envelope["id"]:
        raise UndecodableEvent("envelope id is empty or holds a control character")
    suspect = any(escape in value.lower() for escape in _SUSPECT_ESCAPES)
    if not suspect and value.count(b"{") + value.count(b"[") <= RECORD_MAX_DEPTH:
        return
    # Iterative: any depth, any width; only records the byte scan found suspicious get here.
    stack: list[tuple[Any, int]] = [(envelope, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            if level > RECORD_MAX_DEPTH:
                raise UndecodableEvent(f"record nests a value deeper than {VALUE_MAX_DEPTH} levels")
            for key, child in item.items():
                _check_text(key)
                stack.append((child, level + 1))
        elif isinstance(item, list):
            if level > RECORD_MAX_DEPTH:
                raise UndecodableEvent(f"record nests a value deeper than {VALUE_MAX_DEPTH} levels")
            stack.extend((child, level + 1) for child in item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    if "\x00" in text:
        # PostgreSQL's text cannot hold it: counted, it would make every copy of the windows fail
        # (the good ones with it) on every flush.
        raise UndecodableEvent("record holds a NUL character")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise UndecodableEvent("record holds a lone surrogate, which is not UTF-8") from None


def _text(data: dict[str, Any], field: str, *, max_chars: int = SUBJECT_MAX_CHARS) -> str:
    raw = data.get(field)
    if not isinstance(raw, str) or not raw:
        raise UndecodableEvent(f"field {field!r} is missing or not a string")
    _check_text(raw)
    problem = _id_problem(raw, f"field {field!r}", max_chars=max_chars)
    if problem is not None:
        raise UndecodableEvent(problem)
    return raw


def _matching(data: dict[str, Any], field: str, pattern: re.Pattern[str]) -> str:
    raw = data.get(field)
    if not isinstance(raw, str) or not pattern.fullmatch(raw):
        raise UndecodableEvent(f"field {field!r} is not an identifier (it must match {pattern.pattern})")
    return raw


def _envelope(value: bytes | None) -> tuple[str, dict[str, Any]]:
    if value is None:
        raise UndecodableEvent("record has no value (tombstone)")
    try:
        envelope = json.loads(value, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UndecodableEvent(f"record is not JSON: {err}") from err
    except RecursionError as err:
        # `[[[[...`: nested past the interpreter's limit; it killed the worker's faust agent.
        raise UndecodableEvent("record is JSON nested too deeply") from err
    if not isinstance(envelope, dict):
        raise UndecodableEvent("envelope is not a JSON object")
    kind, data = envelope.get("type"), envelope.get("data")
    if not isinstance(kind, str) or not isinstance(data, dict):
        raise UndecodableEvent("envelope lacks `type` or `data`")
    if kind in _COUNTED:
        check_acceptable(value, envelope)
    occurred = envelope.get("occurred_at")
    if isinstance(occurred, str):
        data = {**data, "_occurred_at": occurred}
    return kind, data


def observe(family: Family, value: bytes | None, record_timestamp: float | None) -> Observation | None:
    """The observation ``value`` (an envelope from a topic of ``family``) makes, or None when its
    type is not counted (schedule lifecycle, command acknowledgements, redrives, ...).

    ``record_timestamp`` is the Kafka record's timestamp in seconds: for a JobDue it is when the
    ticker produced it, which is what firing lateness is measured from (as the read model does).
    Raises UndecodableEvent for a record that is not a readable envelope.
    """
    kind, data = _envelope(value)
    if family == "runs":
        return _run(kind, data, record_timestamp)
    if family == "schedules":
        if kind != "slot.skipped":
            return None
        schedule = _matching(data, "schedule_id", SCHEDULE_ID)
        return Observation("schedules", schedule, _instant(data, "slot"), "slots_skipped")
    if kind != "dlq.status_changed" or data.get("status") != "parked":
        return None
    return Observation("dlq", _text(data, "topic"), _instant(data, "at"), "parked")


def _run(kind: str, data: dict[str, Any], record_timestamp: float | None) -> Observation | None:
    if kind == "job.due":
        slot = _instant(data, "slot")
        target = _instant(data, "fire_at") if data.get("fire_at") else slot
        lateness = None if record_timestamp is None else max(0.0, record_timestamp - target)
        job = _text(data, "job_id", max_chars=JOB_ID_MAX_CHARS)
        handler = _matching(data, "handler", IDENTIFIER)
        return Observation("runs", job, target, "due", lateness=lateness, handler=handler)
    counter = _RUN_COUNTER_OF.get(kind)
    if counter is None:
        return None
    job = _text(data, "job_id")
    if data.get("slot") is not None:
        _instant(data, "slot")
    if kind == "run.started":
        return Observation("runs", job, _instant(data, "started_at"), counter)
    if kind == "run.completed":
        finished = _instant(data, "finished_at")
        duration = max(0.0, finished - _instant(data, "started_at"))
        return Observation("runs", job, finished, counter, duration=duration)
    if kind == "run.failed":
        return Observation("runs", job, _instant(data, "finished_at"), counter)
    # Retrying, dead-lettered and skipped carry no instant of their own: the envelope's is when
    # the claimer decided.
    return Observation("runs", job, _instant(data, "_occurred_at"), counter)
