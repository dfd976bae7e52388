"""Typed views of Kafka records, so nothing outside `slotflow.kafka` touches aiokafka objects."""

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None

    @property
    def position(self) -> str:
        """`topic:partition:offset`, unique per record for as long as the topic lives."""
        return f"{self.topic}:{self.partition}:{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    @classmethod
    def from_aiokafka(cls, raw: Any) -> "Record":
        """Copy an aiokafka ConsumerRecord into a Record."""
        return cls(
            topic=str(raw.topic),
            partition=int(raw.partition),
            offset=int(raw.offset),
            key=raw.key,
            value=raw.value,
            headers=tuple((str(k), bytes(v) if v is not None else b"") for k, v in raw.headers or ()),
            timestamp_ms=int(raw.timestamp) if raw.timestamp is not None else None,
        )


class Delivered(NamedTuple):
    """Where the broker stored a produced record (a NamedTuple: one per record sent, built in C)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
