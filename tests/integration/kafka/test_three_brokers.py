"""A real three-broker cluster (the devstack's SLOTFLOW_KAFKA_BROKERS=3 mode), started by these tests
on ports and a state dir of their own: topics get three replicas and min.insync.replicas=2, a
transaction commits and a read_committed consumer sees it; with one broker SIGKILLed acks=all
writes still succeed, with two down they are refused (nothing acknowledged is lost), and after the
restart the cluster takes writes again.

Private, so the shared devstack keeps its single broker. One cluster per module (three JVMs).
"""

import asyncio
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from slotflow.contracts.topics import TopicSpec
from slotflow.errors import TransientStorageError
from slotflow.kafka.admin import describe_cluster, ensure_topics
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name

REPO = Path(__file__).resolve().parents[3]
sys.path.append(str(REPO / "deploy" / "devstack"))

from _config import Config  # noqa: E402  (the devstack's modules, from their folder)
from _kafka import start_kafka, stop_kafka  # noqa: E402
from _kafka_cluster import node_by_id, start_nodes, stop_node  # noqa: E402

#: Six consecutive ports from here (three brokers, three controllers), below the ephemeral range.
PORT_SEARCH_FROM = 29400


def _free_run(start: int, length: int) -> int:
    """The first port p >= start with p .. p+length-1 all free on 127.0.0.1."""
    for base in range(start, 32768 - length, length):
        ok = True
        for port in range(base, base + length):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no {length} consecutive free ports from {start}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Config]:
    state = Path(tempfile.mkdtemp(prefix="slotflow-3brokers-"))
    base = int(os.environ.get("SLOTFLOW_TEST_BROKERS_PORT") or _free_run(PORT_SEARCH_FROM, 6))
    # Node n: broker base + 2(n-1), controller base + 1 + 2(n-1) (_config.Config.kafka_nodes).
    config = Config(
        state_dir=state,
        cache_dir=REPO / ".cache",
        kafka_port=base,
        controller_port=base + 1,
        pg_port=1,  # unused: only Kafka starts
        brokers=3,
    )
    try:
        asyncio.run(start_kafka(config))
        yield config
    finally:
        asyncio.run(stop_kafka(False, config, timeout=10.0))
        shutil.rmtree(state, ignore_errors=True)


def _spec(name: str) -> TopicSpec:
    return TopicSpec(
        name=name,
        key="a test key",
        partitions=1,
        retention_ms=3_600_000,
        cleanup_policy="delete",
        producers=("test",),
        consumers=("test",),
        purpose="the 3-broker tests",
    )


async def _topic_facts(bootstrap: str, topic: str) -> tuple[list[int], dict[str, str]]:
    """(replica ids of partition 0, the topic's configs) as the cluster reports them."""
    admin: Any = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        replicas = sorted(described[0]["partitions"][0]["replicas"])
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = responses[0].to_object()["resources"][0]["config_entries"]
        # Source 1 (DYNAMIC_TOPIC_CONFIG): set on the topic itself, not inherited from the broker.
        configs = {str(e["config_names"]): str(e["config_value"]) for e in entries if e["config_source"] == 1}
    finally:
        await admin.close()
    return replicas, configs


async def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            got = [r.value for records in batch.values() for r in records if r.value is not None]
            values.extend(got)
            if not got and values:
                break
        return values
    finally:
        await consumer.stop()


async def test_topics_have_three_replicas_and_min_insync_two(cluster: Config) -> None:
    info = await describe_cluster(cluster.bootstrap)
    assert info.broker_ids == (1, 2, 3)
    topic = unique_name("rf")
    assert await ensure_topics(cluster.bootstrap, [_spec(topic)]) == [topic]
    replicas, configs = await _topic_facts(cluster.bootstrap, topic)
    assert replicas == [1, 2, 3]
    assert configs["min.insync.replicas"] == "2"
    # Asked for explicitly, both settings are taken as given.
    other = unique_name("rf")
    await ensure_topics(cluster.bootstrap, [_spec(other)], replication_factor=2, min_insync_replicas=1)
    replicas, configs = await _topic_facts(cluster.bootstrap, other)
    assert len(replicas) == 2
    assert configs["min.insync.replicas"] == "1"
    with pytest.raises(ValueError, match="exceeds replication_factor"):
        await ensure_topics(
            cluster.bootstrap, [_spec(unique_name("rf"))], replication_factor=2, min_insync_replicas=3
        )


async def test_a_transaction_commits_and_read_committed_sees_it(cluster: Config) -> None:
    topic = unique_name("txn")
    await ensure_topics(cluster.bootstrap, [_spec(topic)])
    settings = KafkaSettings(bootstrap=cluster.bootstrap)
    producer = Producer(settings, client_id="rf3-txn", transactional_id=unique_name("txid"))
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_raw(topic, key=b"k", value=b"committed-1")
            await producer.send_raw(topic, key=b"k", value=b"committed-2")
        with pytest.raises(RuntimeError):  # noqa: PT012 - the transaction aborts on the raise
            async with producer.transaction():
                await producer.send_raw(topic, key=b"k", value=b"aborted")
                raise RuntimeError("abort this one")
    finally:
        await producer.stop()
    assert await _read_all(cluster.bootstrap, topic) == [b"committed-1", b"committed-2"]


async def test_one_broker_down_writes_go_on_two_down_they_are_refused(cluster: Config) -> None:
    topic = unique_name("kill")
    await ensure_topics(cluster.bootstrap, [_spec(topic)])
    settings = KafkaSettings(bootstrap=cluster.bootstrap)
    acknowledged: list[bytes] = []
    async with Producer(settings, client_id="rf3-kill") as producer:
        for i in range(5):
            await producer.send_raw(topic, key=b"k", value=f"before-{i}".encode())
            acknowledged.append(f"before-{i}".encode())

        # One broker SIGKILLed: two in-sync copies remain, acks=all writes still succeed.
        assert await stop_node(cluster, node_by_id(cluster, 3), True, 10.0)
        started = time.monotonic()
        for i in range(5):
            await asyncio.wait_for(producer.send_raw(topic, key=b"k", value=f"one-down-{i}".encode()), 60)
            acknowledged.append(f"one-down-{i}".encode())
        one_down_s = time.monotonic() - started

    # A second one down: one copy left, fewer than min.insync.replicas (and no metadata quorum,
    # since every node is also a controller). The write is refused, never acknowledged.
    assert await stop_node(cluster, node_by_id(cluster, 2), True, 10.0)
    # Not idempotent: an idempotent producer (slotflow's) never expires a batch, it waits until the
    # brokers are back; this one gives up after its request timeout, so the refusal is observable.
    raw: Any = AIOKafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=False, request_timeout_ms=8000
    )
    await raw.start()
    started = time.monotonic()
    try:
        with pytest.raises(KafkaError) as refused:
            await raw.send_and_wait(topic, key=b"k", value=b"two-down")
    finally:
        await raw.stop()
    assert time.monotonic() - started < 60, "the refusal took too long"
    # How it is refused depends on what the client learns first: too few replicas, a leader it
    # cannot reach (the partition's leader was among the two killed), or no answer in time.
    assert type(refused.value).__name__ in {
        "NotEnoughReplicasError",
        "KafkaTimeoutError",
        "RequestTimedOutError",
        "NodeNotReadyError",
        "KafkaConnectionError",
        "NotLeaderForPartitionError",
        "LeaderNotAvailableError",
    }

    # Both back: the cluster takes writes again and every acknowledged record is there, in order.
    await start_nodes(cluster, list(cluster.kafka_nodes), 120.0)
    async with Producer(settings, client_id="rf3-back") as producer:
        deadline = time.monotonic() + 60
        while True:
            try:
                await producer.send_raw(topic, key=b"k", value=b"after")
                break
            except TransientStorageError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1)
    values = await _read_all(cluster.bootstrap, topic)
    kept = [v for v in values if v != b"two-down"]
    assert kept == [*acknowledged, b"after"], values
    assert one_down_s < 60
