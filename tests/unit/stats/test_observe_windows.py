"""Decoding the contracts' events as the stats worker does, and counting each record once."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotflow.contracts import (
    DeadLetterStatusChanged,
    JobDue,
    Message,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
    ScheduleCreated,
    SlotSkipped,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS
from slotflow_stats import config
from slotflow_stats.errors import StatsError, UndecodableEvent
from slotflow_stats.observe import Observation, observe
from slotflow_stats.windows import HOUR, MINUTE, apply, window_start

T = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
COMMON: dict[str, Any] = {
    "run_id": "s@x",
    "job_id": "s",
    "slot": T,
    "attempt": 1,
    "fence_token": 1,
    "owner": "c",
}


def _bytes(message: Message, at: datetime = T) -> bytes:
    return encode(wrap(message, id="e", key="s", source="test", occurred_at=at))


def test_topic_names_are_the_topic_tables() -> None:
    assert RUN_EVENTS.name == config.RUN_EVENTS
    assert JOBS_DUE.name == config.JOBS_DUE
    assert SCHEDULE_EVENTS.name == config.SCHEDULE_EVENTS
    assert DLQ_EVENTS.name == config.DLQ_EVENTS


def test_every_counted_event_decodes() -> None:
    later = T + timedelta(seconds=2)
    due = observe("runs", _bytes(JobDue(**COMMON, handler="h.x", fire_at=T)), T.timestamp() + 0.25)
    assert due == Observation("runs", "s", T.timestamp(), "due", lateness=0.25, handler="h.x")
    started = observe("runs", _bytes(RunStarted(**COMMON, started_at=T)), None)
    assert started == Observation("runs", "s", T.timestamp(), "started")
    done = observe("runs", _bytes(RunCompleted(**COMMON, started_at=T, finished_at=later)), None)
    assert done == Observation("runs", "s", later.timestamp(), "completed", duration=2.0)
    failed = RunFailed(**COMMON, error_type="E", message="m", retryable=True, finished_at=later)
    assert observe("runs", _bytes(failed), None) == Observation("runs", "s", later.timestamp(), "failed")
    retrying = RunRetrying(**COMMON, next_attempt=2, retry_at=later, delay=timedelta(seconds=1))
    assert observe("runs", _bytes(retrying, later), None) == Observation(
        "runs", "s", later.timestamp(), "retried"
    )
    dead = RunDeadLettered(**COMMON, reason="attempts_exhausted")
    assert observe("runs", _bytes(dead, later), None) == Observation(
        "runs", "s", later.timestamp(), "dead_lettered"
    )
    skipped = observe("runs", _bytes(RunSkipped(**COMMON, reason="overlap")), None)
    assert skipped is not None
    assert skipped.counter == "skipped"
    slot = observe(
        "schedules", _bytes(SlotSkipped(schedule_id="s", run_id="s@x", slot=T, reason="misfire")), None
    )
    assert slot == Observation("schedules", "s", T.timestamp(), "slots_skipped")
    parked = DeadLetterStatusChanged(
        dead_letter_id="t:0:1", status="parked", reason="undecodable", topic="t", source_service="api", at=T
    )
    assert observe("dlq", _bytes(parked), None) == Observation("dlq", "t", T.timestamp(), "parked")


def test_uncounted_events_are_ignored() -> None:
    redriven = DeadLetterStatusChanged(
        dead_letter_id="t:0:1", status="redriven", reason="r", topic="t", source_service="api", at=T
    )
    assert observe("dlq", _bytes(redriven), None) is None
    assert observe("runs", b'{"type": "something.new", "data": {}}', None) is None


def test_due_without_fire_at_is_late_against_its_slot_and_never_negative() -> None:
    due = observe("runs", _bytes(JobDue(**COMMON, handler="h.x")), T.timestamp() - 5)
    assert due is not None
    assert due.at == T.timestamp()
    assert due.lateness == 0.0


#: The start of a run.started envelope with its id and key (the rest is each case's).
ID = b'{"type": "run.started", "id": "s@x/1/started", "key": "s", '


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "tombstone"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"type": "run.started"}', "lacks"),
        # An envelope others refuse (no id or key) is refused here too (the acceptance rule).
        (b'{"type": "run.started", "data": {"job_id": "s"}}', "envelope id"),
        (ID + b'"data": {"job_id": "s"}}', "started_at"),
        (ID + b'"data": {"job_id": "s", "started_at": "yesterday"}}', "ISO-8601"),
        (ID + b'"data": {"job_id": "s", "started_at": "2026-01-01T00:00:00"}}', "offset"),
        (ID + b'"data": {"started_at": "2026-01-01T00:00:00Z"}}', "job_id"),
        # Killed the worker's faust agent (RecursionError) before; a key no producer of ours writes.
        (b"[" * 100_000, "nested too deeply"),
        (ID + b'"data": {"job_id": "' + b"j" * 1001 + b'"}}', "longer than 1000"),
    ],
)
def test_unreadable_records_say_why(value: bytes | None, why: str) -> None:
    with pytest.raises(UndecodableEvent, match=why) as caught:
        observe("runs", value, None)
    assert isinstance(caught.value, StatsError)


def test_a_redelivered_record_is_counted_once() -> None:
    obs = Observation("runs", "s", T.timestamp(), "completed", duration=0.5)
    first = apply(None, obs, topic="runs", offset=7)
    assert first is not None
    assert first["counts"] == {"completed": 1}
    assert first["n"] == 1
    assert apply(first, obs, topic="runs", offset=7) is None
    assert apply(first, obs, topic="runs", offset=3) is None
    # Another topic has its own offsets (JobDue and run events share a key).
    other = apply(first, Observation("runs", "s", T.timestamp(), "due", handler="h"), topic="due", offset=2)
    assert other is not None
    assert other["counts"] == {"completed": 1, "due": 1}
    assert other["handler"] == "h"
    assert other["offsets"] == {"runs": 7, "due": 2}
    second = apply(other, obs, topic="runs", offset=8)
    assert second is not None
    assert second["counts"]["completed"] == 2
    assert second["n"] == 3
    # The earlier value is not changed in place (faust keeps it until the write).
    assert first["counts"] == {"completed": 1}


def test_tumbling_windows() -> None:
    at = T.timestamp()
    assert window_start(at, MINUTE) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    assert window_start(at, HOUR) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    assert window_start(at + 29.999, MINUTE) == window_start(at, MINUTE)
    assert window_start(at + 30, MINUTE) == window_start(at, MINUTE) + 60


def test_unused_schedule_lifecycle_is_ignored() -> None:
    from slotflow.contracts import CronSpec, ScheduleDefinition

    created = ScheduleCreated(
        schedule_id="s",
        definition=ScheduleDefinition(spec=CronSpec(expression="* * * * *"), handler="h"),
        paused=False,
        next_fire_at=T,
    )
    assert observe("schedules", _bytes(created), None) is None


def test_what_postgresql_cannot_store_or_no_parser_decodes_is_undecodable() -> None:
    # Counted, a NUL subject made every copy of the windows fail; deep nesting raised RecursionError.
    nul = _bytes(RunStarted(**COMMON, started_at=T)).replace(b'"job_id":"s"', b'"job_id":"s\\u0000x"')
    with pytest.raises(UndecodableEvent, match="NUL"):
        observe("runs", nul, None)
    deep = b'{"type": "run.started", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(UndecodableEvent, match="nested too deeply"):
        observe("runs", deep, None)
    due = _bytes(JobDue(**COMMON, handler="h.x", fire_at=T)).replace(
        b'"handler":"h.x"', b'"handler":"h\\u0000x"'
    )
    # Not counted at all now: every other service refuses that JobDue (the handler is no identifier),
    # so the statistics would count a run nothing else saw.
    with pytest.raises(UndecodableEvent, match="NUL"):
        observe("runs", due, None)
