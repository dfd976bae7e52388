"""`slotflow_kafka_consumer_lag{group,topic,partition}` on the real broker: the records a consumer
is behind per partition, sampled by its own poll from the fetch state (no round trip): the whole
backlog before anything is committed, what is left after a commit, nothing once it caught up, and
no series of its own once it stopped (its partitions are another member's to report)."""

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from slotflow.contracts import JobDue, wrap
from slotflow.contracts.topics import JOBS_DUE
from slotflow.kafka.consumer import Consumer, next_offsets
from slotflow.kafka.lag import LAG_METRIC, ConsumerLag
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
RECORDS = 30


def lags(registry: CollectorRegistry, group: str) -> dict[tuple[str, str], float]:
    """The lag series of ``group``, by (topic, partition), as a scrape reads them."""
    return {
        (sample.labels["topic"], sample.labels["partition"]): sample.value
        for family in registry.collect()
        if family.name == LAG_METRIC
        for sample in family.samples
        if sample.labels["group"] == group
    }


async def test_lag_is_the_backlog_then_what_is_left_after_a_commit_then_nothing(kafka: KafkaSettings) -> None:
    topic = kafka.topic(JOBS_DUE)
    async with Producer(kafka, client_id="test-lag") as producer:
        for n in range(RECORDS):
            job = JobDue(run_id=f"job-{n}@2026-12-02T02:00:00Z", job_id=f"job-{n}", slot=AT, handler="noop")
            await producer.send(
                topic, wrap(job, id=job.run_id, key=job.job_id, source="test", occurred_at=AT)
            )
    registry = CollectorRegistry()
    group = unique_name("lag")
    consumer = Consumer(
        kafka, topic, group_id=group, client_id="test-lag", lag=ConsumerLag(registry, interval=0.0)
    )
    taken: list[Record] = []
    async with consumer:
        # Not committed yet: every record is still behind, whatever the poll already handed out.
        async def backlog_seen() -> bool:
            taken.extend(await consumer.poll(timeout_ms=200, max_records=10))
            return sum(lags(registry, group).values()) == RECORDS and bool(taken)

        await assert_eventually(backlog_seen, timeout=30, message="the whole backlog as lag")
        assert all(t == topic for t, _ in lags(registry, group))
        assert len(taken) < RECORDS

        await consumer.commit(taken)
        held = await consumer.poll(timeout_ms=0, max_records=1)  # the next sample, not committed
        assert sum(lags(registry, group).values()) == RECORDS - len(taken)
        taken.extend(held)

        async def caught_up() -> bool:
            records = await consumer.poll(timeout_ms=200)
            taken.extend(records)
            await consumer.commit(taken)
            return len(taken) >= RECORDS and sum(lags(registry, group).values()) == 0

        await assert_eventually(caught_up, timeout=30, message="no lag once every record is committed")
        committed = next_offsets(taken)
        assert {(t, str(p)) for t, p in committed} <= set(lags(registry, group))
    assert lags(registry, group) == {}
