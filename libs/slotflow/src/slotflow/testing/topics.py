"""TopicTail: read topics from the beginning in the background and keep every envelope seen.

For integration tests against the real broker: what did the service under test publish?
"""

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import Envelope
from slotflow.contracts.topics import TopicSpec
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing.waiting import assert_eventually, unique_name


def first_reads(records: Sequence[Record], positions: set[str]) -> list[Record]:
    """The records of a poll not read before, by log position; adds them to ``positions``.

    A test reader in a group of its own can lose its session on a loaded machine and rejoin from
    the start (it commits nothing), re-reading what it already counted.
    """
    fresh = [r for r in records if r.position not in positions]
    positions.update(r.position for r in fresh)
    return fresh


class Seen(NamedTuple):
    """A consumed record, decoded, with the test process's clock at receipt."""

    record: Record
    envelope: Envelope
    received_at: datetime


@dataclass
class TopicTail:
    """`async with TopicTail(kafka, [SPEC, ...]) as tail:` tails the topics in a fresh group."""

    kafka: KafkaSettings
    specs: Sequence[TopicSpec]
    seen: list[Seen] = field(default_factory=list)
    _task: "asyncio.Task[None] | None" = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _positions: set[str] = field(default_factory=set)

    async def __aenter__(self) -> "TopicTail":
        consumer = Consumer(
            self.kafka,
            *(self.kafka.topic(s) for s in self.specs),
            group_id=unique_name("tail"),
            client_id="tail",
            max_poll_records=5000,
        )
        await consumer.start()
        self._task = asyncio.create_task(self._run(consumer))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                for record in first_reads(await consumer.poll(timeout_ms=100), self._positions):
                    self.seen.append(Seen(record, decode(record.value), datetime.now(UTC)))
        finally:
            await consumer.stop()

    def seen_envelopes(self) -> list[Envelope]:
        return [s.envelope for s in self.seen]

    def of_type(self, type_: str) -> list[Envelope]:
        return [s.envelope for s in self.seen if s.envelope.type == type_]

    def by_id(self, event_id: str) -> list[Envelope]:
        return [s.envelope for s in self.seen if s.envelope.id == event_id]

    def indexed(self) -> dict[str, Seen]:
        """Everything seen so far by envelope id (the last one seen for a repeated id)."""
        return {s.envelope.id: s for s in self.seen}

    async def wait_for(
        self, check: Callable[["TopicTail"], bool], *, timeout: float = 30.0, message: str = "records"
    ) -> None:
        await assert_eventually(lambda: check(self), timeout=timeout, message=message)


__all__ = ["Seen", "TopicTail", "first_reads"]
