"""The projector's own error path: a record its projection refuses is parked whatever the DLQ
does meanwhile (issue 23). Raised from there, the batch's other facts were dropped and the next
batch's commit passed them by: lost from the read model until a rebuild."""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

from slotflow.contracts import ScheduleDeleted, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import SCHEDULE_EVENTS
from slotflow.errors import PermanentError, TransientStorageError
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_api.config import Settings
from slotflow_api.projection import Fact
from slotflow_api.projector import Projector
from tests.unit.kafka.test_loop import FakeProducer

SETTINGS = Settings(
    kafka=KafkaSettings(bootstrap="127.0.0.1:1"),
    postgres=PostgresSettings(dsn="postgresql://nobody@127.0.0.1:1/none"),
)


class _RefusesOne(Projector):
    """Its projection refuses the fact `bad` (as a constraint would), and takes the others."""

    def __init__(self, dlq: FakeProducer) -> None:
        super().__init__(cast(Pool, None), SETTINGS)
        self._dlq = cast(Producer, dlq)
        self.written: list[str] = []

    async def _write(self, facts: Sequence[Fact]) -> int:
        if any(f.envelope.id == "bad" for f in facts):
            raise PermanentError("the projection refuses this record")
        self.written.extend(f.envelope.id for f in facts)
        return len(facts)


def _facts() -> list[Fact]:
    facts = []
    for offset, id_ in enumerate(("before", "bad", "after")):
        message = ScheduleDeleted(schedule_id=f"s-{id_}")
        envelope = wrap(message, id=id_, key=f"s-{id_}", source="test", occurred_at=datetime.now(UTC))
        record = Record(SCHEDULE_EVENTS.name, 0, offset, envelope.key.encode(), encode(envelope), (), None)
        facts.append(Fact(SCHEDULE_EVENTS.name, record, envelope, message))
    return facts


async def _flush(projector: _RefusesOne) -> bool:
    for fact in _facts():
        projector._staged.append(fact)
    return await projector.flush()


async def test_a_dlq_outage_is_waited_out_and_the_other_facts_still_land() -> None:
    dlq = FakeProducer([TransientStorageError("broker away"), TransientStorageError("broker away")])
    projector = _RefusesOne(dlq)
    assert await _flush(projector) is True
    assert projector.written == ["before", "after"]
    assert [letter.offset for letter in dlq.letters()] == [1]


async def test_an_unparkable_record_is_skipped_and_the_other_facts_still_land() -> None:
    refused = ValueError("the DLQ topic refuses it")
    dlq = FakeProducer([refused, refused, refused])
    projector = _RefusesOne(dlq)
    assert await _flush(projector) is True
    assert projector.written == ["before", "after"]
    assert dlq.sent == []
