"""The intake's one-pass JobDue decoding accepts exactly what `decode_record` accepts."""

import json
from dataclasses import replace
from typing import Any

import pytest

from slotflow.contracts import JobDue, RunStarted
from slotflow.errors import PoisonMessage
from slotflow.kafka.poison import decode_record
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow_claimer.events import RunEvents
from slotflow_claimer.intake import Intake
from slotflow_claimer.metrics import ClaimerMetrics
from tests.unit.claimer.support import due

KAFKA = KafkaSettings(topic_namespace="t", max_message_bytes=4096)
INTAKE = Intake(
    None,  # type: ignore[arg-type]  # decoding touches no database
    schema="claimer",
    owner="a",
    lease_ttl=30,
    kafka=KAFKA,
    events=RunEvents(KAFKA),
    metrics=ClaimerMetrics(),
)
GOOD = due().record


def _edited(**changes: Any) -> Record:
    envelope = json.loads(GOOD.value or b"")
    data = envelope["data"]
    for name, value in changes.items():
        target = data if name.startswith("data_") else envelope
        target[name.removeprefix("data_")] = value
    return replace(GOOD, value=json.dumps(envelope).encode())


CASES = {
    "good": GOOD,
    "record key differs": replace(GOOD, key=b"other"),
    "no record key": replace(GOOD, key=None),
    "envelope key differs from job id": _edited(key="other"),
    "another type": _edited(type=RunStarted.message_type),
    "unknown version": _edited(version=9),
    "invalid payload": _edited(data_slot="not a time"),
    "missing handler": _edited(data_handler=None),
    "naive occurred_at": _edited(occurred_at="2026-12-02T02:00:01"),
    "empty id": _edited(id=""),
    "unknown fields": _edited(extra=1, data_extra=2),
    "not utf-8": replace(GOOD, value=b'{"type": "\xff"}'),
    "not json": replace(GOOD, value=b"{"),
    "empty": replace(GOOD, value=b""),
    "too large": _edited(data_payload={"x": "y" * 5000}),
}


def _reference(record: Record) -> JobDue | type[PoisonMessage]:
    try:
        _, message = decode_record(record, accept=(JobDue,), max_bytes=KAFKA.max_message_bytes)
    except PoisonMessage as err:
        return type(err)
    if not isinstance(message, JobDue):
        raise TypeError(message)
    return message


@pytest.mark.parametrize("name", list(CASES))
def test_accepts_and_refuses_what_decode_record_does(name: str) -> None:
    record = CASES[name]
    dues, poison = INTAKE.decode([record])
    expected = _reference(record)
    if isinstance(expected, JobDue):
        assert poison == []
        assert [d.job for d in dues] == [expected]
        assert dues[0].record is record
        assert dues[0].envelope is None  # taken by the one-pass path, not the fallback
    else:
        assert dues == []
        assert [(r, type(e)) for r, e in poison] == [(record, expected)]


def test_a_batch_keeps_its_order_whatever_path_each_record_takes() -> None:
    records = [due(f"job-{i}", offset=i).record for i in range(3)]
    records.insert(1, CASES["another type"])
    dues, poison = INTAKE.decode(records)
    assert [d.job.job_id for d in dues] == ["job-0", "job-1", "job-2"]
    assert len(poison) == 1
