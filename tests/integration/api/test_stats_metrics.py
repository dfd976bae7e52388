"""The stats worker's /metrics, on the real broker and database: the events it counted per family
are exactly the workload's, the windows it copied to PostgreSQL and when, and the consumer lag of
its source topics (the library's metric name and labels) down to nothing once it caught up."""

from collections import Counter
from pathlib import Path

from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.api.stats_support import StatsProcess, past_minute, stored_counts, workload


async def test_the_worker_serves_what_it_counted_copied_and_lags(
    producer: Producer, kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    work = workload(past_minute(10))
    await producer.send_many(work.topics(kafka))
    per_family: Counter[str] = Counter()
    for (family, _, _, _), count in work.expected.items():
        per_family[family] += count
    worker = StatsProcess(kafka, pg_dsn, tmp_path)
    group = f"{kafka.topic_namespace}.slotflow-stats"
    try:

        async def caught_up() -> bool:
            assert worker.alive(), worker.log()
            if Counter(await stored_counts(pg_dsn)) != work.expected:
                return False
            samples = await worker.metrics()
            lags = {
                k: v
                for k, v in samples.items()
                if k.startswith(f"slotflow_kafka_consumer_lag{{group={group},")
            }
            return bool(lags) and sum(lags.values()) == 0

        await assert_eventually(caught_up, timeout=90, interval=0.5, message="counted, copied, no lag")
        samples = await worker.metrics()
        for family in ("runs", "schedules", "dlq"):
            assert samples[f"slotflow_stats_events_total{{family={family}}}"] == per_family[family], family
        assert samples["slotflow_stats_windows_copied_total"] > 0
        assert samples["slotflow_stats_last_copy_timestamp_seconds"] > 0
        assert samples["slotflow_stats_copy_failures_total"] == 0
        topics = {
            key.split("topic=", 1)[1].rstrip("}")
            for key in samples
            if key.startswith(f"slotflow_kafka_consumer_lag{{group={group},")
        }
        assert topics == {kafka.topic(spec) for spec in (RUN_EVENTS, JOBS_DUE, SCHEDULE_EVENTS, DLQ_EVENTS)}
    finally:
        worker.close()
