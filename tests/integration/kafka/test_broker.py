"""The broker under test is a real Apache Kafka in KRaft mode, reached over the wire protocol."""

import re

from slotflow.kafka.admin import describe_cluster
from slotflow.settings import KafkaSettings


async def test_broker_reports_cluster_id_and_kafka_4_api_versions(kafka: KafkaSettings) -> None:
    info = await describe_cluster(kafka.bootstrap)

    # KRaft cluster ids are 16 random bytes in URL-safe base64 without padding.
    assert info.cluster_id is not None
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", info.cluster_id)
    assert info.broker_ids
    assert info.controller_id is not None

    produce = info.api("Produce")
    assert produce is not None
    # Produce v12 and later exist only in Kafka 4.x brokers.
    assert produce.max_version >= 12
    # Only a KRaft controller quorum answers DescribeQuorum.
    assert info.api("DescribeQuorum") is not None
    assert info.api("InitProducerId") is not None


async def test_the_stack_created_every_topic_of_the_table(kafka_settings: KafkaSettings) -> None:
    info = await describe_cluster(kafka_settings.bootstrap)
    for spec in kafka_settings.topics():
        assert info.topic_partitions.get(spec.name) == spec.partitions, spec.name
