"""A consumer whose start failed half-way can be started again.

aiokafka's consumer cannot: a start that fails after it built its fetcher (the broker went away
between the bootstrap and the group join) leaves the fetcher behind, and the next `start()` fails
with `AssertionError: Did you call start twice?`. In an hour-long fault run that crashed a claimer's
redrive loop, which retries a failed start, and with it the claimer. The wrapper replaces the
client after a failed start; here a stand-in for aiokafka's class fails the way it does.
"""

from typing import Any, ClassVar

import pytest
from aiokafka.errors import KafkaConnectionError

from slotflow.errors import TransientStorageError
from slotflow.kafka import consumer as consumer_module
from slotflow.kafka.consumer import Consumer
from slotflow.settings import KafkaSettings


class HalfStarting:
    """Like AIOKafkaConsumer: one start per instance; the first instance's start fails half-way."""

    made: ClassVar[list["HalfStarting"]] = []

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.subscribed: list[str] = []
        self._fetcher: object | None = None
        self.stopped = False
        HalfStarting.made.append(self)

    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        self.subscribed = topics

    async def start(self) -> None:
        assert self._fetcher is None, "Did you call `start` twice?"
        self._fetcher = object()
        if len(HalfStarting.made) == 1:
            raise KafkaConnectionError("the broker went away during the start")

    async def stop(self) -> None:
        self.stopped = True  # leaves _fetcher set, as aiokafka does


async def test_a_failed_start_can_be_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broker_answers(*_: object) -> None:
        return None

    HalfStarting.made = []
    monkeypatch.setattr(consumer_module, "AIOKafkaConsumer", HalfStarting)
    monkeypatch.setattr(consumer_module, "wait_for_kafka", broker_answers)
    consumer = Consumer(KafkaSettings(), "slotflow.dlq.redrives.v1", group_id="g", client_id="c")
    with pytest.raises(TransientStorageError, match="went away"):
        await consumer.start()
    await consumer.start()  # a fresh client: no AssertionError
    first, second = HalfStarting.made
    assert first.stopped
    assert second.subscribed == first.subscribed == ["slotflow.dlq.redrives.v1"]
    assert second.options == first.options
