"""ConsumeLoop's ordering and failure sorting, against in-memory stand-ins (no I/O).

The real broker is exercised in tests/integration/kafka/test_consume_loop.py; here the stand-ins
let a test decide exactly when the DLQ fails or a commit is lost.
"""

import asyncio
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from slotflow.contracts import REGISTRY, DeadLettered, Envelope, JobDue, wrap
from slotflow.contracts.codec import encode
from slotflow.core.identity import run_id
from slotflow.errors import (
    MessageTooLarge,
    PermanentError,
    TransientError,
    TransientStorageError,
    UnknownMessageType,
)
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered, Record

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def good(n: int) -> Record:
    slot = AT + timedelta(seconds=n)
    job = JobDue(run_id=run_id("j", slot), job_id="j", slot=slot, handler="h")
    return Record(
        "t", 0, n, b"j", encode(wrap(job, id=job.run_id, key="j", source="s", occurred_at=AT)), (), None
    )


def bad(n: int) -> Record:
    return Record("t", 0, n, b"j", b"{truncated", (), None)


class FakeProducer:
    def __init__(self, failures: Sequence[BaseException] = ()) -> None:
        self.failures = list(failures)
        self.sent: list[Envelope] = []
        self.log: list[str] | None = None

    async def send(self, topic: str, envelope: Envelope, **_: Any) -> Delivered:
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(envelope)
        if self.log is not None:
            self.log.append(f"dlq:{envelope.id}")
        return Delivered(topic, 0, len(self.sent), 0)

    def letters(self) -> list[DeadLettered]:
        return [cast(DeadLettered, REGISTRY.parse(e)) for e in self.sent]


class FakeConsumer:
    def __init__(self, batches: list[list[Record]], stop: asyncio.Event, log: list[str]) -> None:
        self.batches = batches
        self.stop = stop
        self.log = log
        self.poll_failures: list[BaseException] = []
        self.commit_failures: list[BaseException] = []

    async def poll(self, *, timeout_ms: int = 0, max_records: int | None = None) -> list[Record]:
        if self.poll_failures:
            raise self.poll_failures.pop(0)
        if not self.batches:
            self.stop.set()
            return []
        return self.batches.pop(0)

    async def commit(self, records: Sequence[Record]) -> None:
        if self.commit_failures:
            raise self.commit_failures.pop(0)
        self.log.append(f"commit:{max(r.offset for r in records)}")


def make_loop(
    batches: list[list[Record]], handler: Any, producer: FakeProducer, **kwargs: Any
) -> tuple[ConsumeLoop, FakeConsumer, asyncio.Event, list[str]]:
    stop = asyncio.Event()
    log: list[str] = []
    producer.log = log
    consumer = FakeConsumer(batches, stop, log)
    loop = ConsumeLoop(
        cast(Consumer, consumer),
        handler=handler,
        dlq=cast(Producer, producer),
        dlq_topic="dlq",
        source_service="unit",
        rng=random.Random(1),
        retry_base=0.0001,
        retry_cap=0.001,
        **kwargs,
    )
    return loop, consumer, stop, log


async def test_poison_is_parked_before_the_commit_and_goods_keep_their_order() -> None:
    seen: list[int] = []

    async def handler(incoming: Incoming) -> None:
        seen.append(incoming.record.offset)
        log.append(f"handled:{incoming.record.offset}")

    producer = FakeProducer()
    loop, _, stop, log = make_loop([[good(0), bad(1), good(2)], [bad(3), good(4)]], handler, producer)
    await loop.run(stop)
    assert seen == [0, 2, 4]
    assert log == ["handled:0", "dlq:t:0:1", "handled:2", "commit:2", "dlq:t:0:3", "handled:4", "commit:4"]
    assert [letter.reason for letter in producer.letters()] == ["undecodable", "undecodable"]
    assert loop.stats.by_reason == {"undecodable": 2}


async def test_a_dlq_outage_is_waited_out_and_nothing_is_committed_before_the_ack() -> None:
    async def handler(incoming: Incoming) -> None:
        return None

    producer = FakeProducer([TransientStorageError("down")] * 3)
    loop, _, stop, log = make_loop([[bad(0), good(1)]], handler, producer)
    await loop.run(stop)
    assert log == ["dlq:t:0:0", "commit:1"]


async def test_a_dlq_refusing_the_size_gets_a_smaller_letter_and_the_loop_goes_on() -> None:
    async def handler(incoming: Incoming) -> None:
        return None

    producer = FakeProducer([MessageTooLarge("topic limit")])
    loop, _, stop, log = make_loop([[bad(0), good(1)]], handler, producer)
    await loop.run(stop)
    assert log == ["dlq:t:0:0", "commit:1"]


async def test_handler_failures_are_sorted() -> None:
    calls: dict[int, int] = {}

    async def handler(incoming: Incoming) -> None:
        offset = incoming.record.offset
        calls[offset] = calls.get(offset, 0) + 1
        if offset == 0:
            raise PermanentError("card declined")
        if offset == 1:
            raise UnknownMessageType("handler found no route")
        if offset == 2:
            raise TransientError("flaky forever")
        if offset == 3 and calls[offset] < 5:
            raise TransientStorageError("database restarting")
        if offset == 4:
            raise KeyError("a bug")

    producer = FakeProducer()
    loop, _, stop, _log = make_loop([[good(n) for n in range(5)]], handler, producer, max_attempts=3)
    await loop.run(stop)
    reasons = {letter.offset: letter.reason for letter in producer.letters()}
    assert reasons == {
        0: "permanent_error",
        1: "unknown_type",
        2: "attempts_exhausted",
        4: "attempts_exhausted",
    }
    # A permanent failure is tried once; an outage as long as it lasts, and then it is handled.
    assert calls == {0: 1, 1: 1, 2: 3, 3: 5, 4: 3}
    assert loop.stats.handled == 1
    assert "KeyError" in producer.letters()[-1].traceback


async def test_poll_and_commit_errors_do_not_stop_the_loop() -> None:
    handled: list[int] = []

    async def handler(incoming: Incoming) -> None:
        handled.append(incoming.record.offset)

    producer = FakeProducer()
    loop, consumer, stop, log = make_loop([[good(0)], [good(1)]], handler, producer)
    consumer.poll_failures = [RuntimeError("coordinator moved"), OSError("reset")]
    consumer.commit_failures = [RuntimeError("rebalanced")]
    await loop.run(stop)
    assert handled == [0, 1]
    assert log == ["commit:1"]
    assert (loop.stats.poll_errors, loop.stats.commit_errors) == (2, 1)


async def test_stopping_during_an_outage_leaves_the_batch_uncommitted() -> None:
    async def handler(incoming: Incoming) -> None:
        raise TransientStorageError("down")

    producer = FakeProducer()
    loop, _, stop, log = make_loop([[good(0)]], handler, producer)
    stop.set()
    with pytest.raises(TransientStorageError):
        await loop.process([good(0)], stop)
    assert log == []


async def test_a_batch_handler_takes_the_good_records_of_a_poll_at_once() -> None:
    batches: list[list[int]] = []
    failures = [TransientStorageError("database restarting")]

    async def batch(incomings: list[Incoming]) -> None:
        if failures:
            raise failures.pop()
        batches.append([i.record.offset for i in incomings])

    async def one(incoming: Incoming) -> None:
        raise AssertionError("the slow path is not needed")

    producer = FakeProducer()
    loop, _, stop, log = make_loop(
        [[good(0), bad(1), good(2)], [good(3)]], one, producer, batch_handler=batch
    )
    await loop.run(stop)
    assert batches == [[0, 2], [3]]  # the outage was waited out, not sent down the slow path
    assert log == ["dlq:t:0:1", "commit:2", "commit:3"]
    assert loop.stats.handled == 3


async def test_a_failing_batch_falls_back_to_one_record_at_a_time() -> None:
    handled: list[int] = []

    async def batch(incomings: list[Incoming]) -> None:
        raise ValueError("something in this batch is wrong")

    async def one(incoming: Incoming) -> None:
        if incoming.record.offset == 1:
            raise PermanentError("this one")
        handled.append(incoming.record.offset)

    producer = FakeProducer()
    loop, _, stop, log = make_loop([[good(0), good(1), good(2)]], one, producer, batch_handler=batch)
    await loop.run(stop)
    assert handled == [0, 2]
    assert [(letter.offset, letter.reason) for letter in producer.letters()] == [(1, "permanent_error")]
    assert log == ["dlq:t:0:1", "commit:2"]
