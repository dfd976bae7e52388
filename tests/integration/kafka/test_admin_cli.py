"""`python -m slotflow.kafka.admin ensure-topics --replication-factor N` on the real broker: the
replication factor reaches the CreateTopics request (the Kubernetes topics Job relies on it)."""

import asyncio
import os
import subprocess
import sys

from slotflow.kafka.admin import describe_cluster
from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name


def ensure_topics(
    kafka: KafkaSettings, namespace: str, replication_factor: int
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": namespace,
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "slotflow.kafka.admin",
            "ensure-topics",
            "--replication-factor",
            str(replication_factor),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_replication_factor_the_cluster_cannot_hold_is_refused_then_one_it_can_creates_every_topic(
    kafka_settings: KafkaSettings,
) -> None:
    namespace = unique_name("rf")
    scoped = kafka_settings.model_copy(update={"topic_namespace": namespace})
    brokers = len(asyncio.run(describe_cluster(kafka_settings.bootstrap)).broker_ids)

    refused = ensure_topics(kafka_settings, namespace, brokers + 1)
    assert refused.returncode == 1, refused.stderr
    assert "InvalidReplicationFactorError" in refused.stderr, refused.stderr
    assert f"replication factor of {brokers + 1} cannot be reached" in refused.stderr, refused.stderr

    created = ensure_topics(kafka_settings, namespace, brokers)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith(f"created {len(scoped.topics())} topics"), created.stdout
    topics = asyncio.run(describe_cluster(kafka_settings.bootstrap)).topic_partitions
    for spec in scoped.topics():
        assert topics.get(spec.name) == spec.partitions, spec.name
