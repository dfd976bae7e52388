"""A client started while its broker is unreachable waits for it, as a service waits for PostgreSQL.

The whole-system fault suite's long run saw services restarted during a broker restart exit at
once ("Unable to bootstrap"), thirteen times in an hour, each exit a restart and a rebalance. The
broker is reached here through a forwarder the test opens late: the port answers nothing at first.
"""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from slotflow.contracts.topics import JOBS_DUE
from slotflow.errors import TransientStorageError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name
from slotflow.testing.processes import free_port
from tests.integration.kafka.test_producer_consumer import job_envelope, read_all


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def forwarder(port: int, target: str) -> AsyncIterator[None]:
    """127.0.0.1:``port`` forwarded to ``target`` (`host:port`) while the block runs."""
    host, target_port = target.rsplit(":", 1)
    pipes: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(target_port))
        for task in (
            asyncio.create_task(_pipe(reader, upstream_writer)),
            asyncio.create_task(_pipe(upstream_reader, writer)),
        ):
            pipes.add(task)
            task.add_done_callback(pipes.discard)

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()
        for task in list(pipes):
            task.cancel()
        await server.wait_closed()


async def test_a_producer_started_before_its_broker_answers_waits_and_then_sends(
    kafka: KafkaSettings,
) -> None:
    port = free_port()
    late = kafka.model_copy(update={"bootstrap": f"127.0.0.1:{port}", "startup_wait_seconds": 60.0})
    producer = Producer(late, client_id="late")
    starting = asyncio.create_task(producer.start())
    await asyncio.sleep(2.0)
    assert not starting.done(), "the producer gave up while the broker was still away"
    async with forwarder(port, kafka.bootstrap):
        await asyncio.wait_for(starting, timeout=60)
        try:
            await producer.send(kafka.topic(JOBS_DUE), job_envelope(1))
        finally:
            await producer.stop()
    [record] = await read_all(kafka, kafka.topic(JOBS_DUE), expect=1)
    assert record.key == b"job-1"


async def test_a_consumer_started_before_its_broker_answers_waits_and_then_joins(
    kafka: KafkaSettings,
) -> None:
    port = free_port()
    late = kafka.model_copy(update={"bootstrap": f"127.0.0.1:{port}", "startup_wait_seconds": 60.0})
    consumer = Consumer(late, kafka.topic(JOBS_DUE), group_id=unique_name("late"), client_id="late")
    starting = asyncio.create_task(consumer.start())
    await asyncio.sleep(2.0)
    assert not starting.done()
    async with forwarder(port, kafka.bootstrap):
        await asyncio.wait_for(starting, timeout=60)
        await consumer.stop()


@pytest.mark.parametrize("wait", [0.0, 1.5])
async def test_past_the_wait_it_fails_with_the_reason(kafka: KafkaSettings, wait: float) -> None:
    nobody = kafka.model_copy(update={"bootstrap": f"127.0.0.1:{free_port()}", "startup_wait_seconds": wait})
    started = time.monotonic()
    with pytest.raises(TransientStorageError, match="Unable to bootstrap"):
        await Producer(nobody, client_id="nobody").start()
    took = time.monotonic() - started
    assert wait <= took < wait + 20
