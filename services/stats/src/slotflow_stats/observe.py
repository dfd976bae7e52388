"""What one event record contributes to the statistics, decoded from the slotflow envelope.

The worker runs in its own environment without the `slotflow` library (see
docs/decisions/0005-stats-on-faust.md), so this reads the envelope's JSON directly, as a tolerant
reader: it needs `type` and a few fields of `data`, and ignores everything else. The message
types and field names are the contracts' (libs/slotflow/src/slotflow/contracts); a unit test
builds every event with those models and decodes it here, so a rename fails a test.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from slotflow_stats.errors import UndecodableEvent

Family = Literal["runs", "schedules", "dlq"]

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
    return parsed.timestamp()


#: The contracts' limit on ids and keys: a subject becomes a window table's key (and its
#: changelog record's), so a longer one, which no producer of ours writes, is refused here.
SUBJECT_MAX_CHARS = 1000


def _text(data: dict[str, Any], field: str) -> str:
    raw = data.get(field)
    if not isinstance(raw, str) or not raw:
        raise UndecodableEvent(f"field {field!r} is missing or not a string")
    if "\x00" in raw:
        # PostgreSQL's text cannot hold it: counted, it would make every copy of the windows fail
        # (the good ones with it) on every flush. No producer of ours sends one; the api parks it.
        raise UndecodableEvent(f"field {field!r} contains a NUL character")
    if len(raw) > SUBJECT_MAX_CHARS:
        raise UndecodableEvent(f"field {field!r} is longer than {SUBJECT_MAX_CHARS} characters")
    return raw


def _handler(data: dict[str, Any]) -> str | None:
    handler = data.get("handler")
    return handler if isinstance(handler, str) and "\x00" not in handler else None


def _envelope(value: bytes | None) -> tuple[str, dict[str, Any]]:
    if value is None:
        raise UndecodableEvent("record has no value (tombstone)")
    try:
        envelope = json.loads(value)
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
        return Observation("schedules", _text(data, "schedule_id"), _instant(data, "slot"), "slots_skipped")
    if kind != "dlq.status_changed" or data.get("status") != "parked":
        return None
    return Observation("dlq", _text(data, "topic"), _instant(data, "at"), "parked")


def _run(kind: str, data: dict[str, Any], record_timestamp: float | None) -> Observation | None:
    if kind == "job.due":
        target = _instant(data, "fire_at") if data.get("fire_at") else _instant(data, "slot")
        lateness = None if record_timestamp is None else max(0.0, record_timestamp - target)
        return Observation(
            "runs", _text(data, "job_id"), target, "due", lateness=lateness, handler=_handler(data)
        )
    counter = _RUN_COUNTER_OF.get(kind)
    if counter is None:
        return None
    job = _text(data, "job_id")
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
