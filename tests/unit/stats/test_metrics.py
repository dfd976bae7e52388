"""The stats worker's metrics: the library's consumer lag name, and the lag of the source topics
only (the changelogs are the worker's own state), series of revoked partitions removed."""

from prometheus_client import CollectorRegistry

from slotflow.kafka.lag import LAG_METRIC as LIBRARY_LAG_METRIC
from slotflow_stats.metrics import LAG_METRIC, StatsMetrics, source_lags


def test_the_lag_has_the_librarys_name() -> None:
    assert LAG_METRIC == LIBRARY_LAG_METRIC


def test_only_source_partitions_with_an_end_and_a_commit_count() -> None:
    ends = {("runs", 0): 10, ("runs", 1): 7, ("runs-changelog", 0): 99, ("dlq", 0): None}
    committed = {("runs", 0): 4, ("runs", 1): 9, ("runs-changelog", 0): 0, ("dlq", 0): 1}
    assert source_lags(ends.keys(), {"runs", "dlq"}, ends, committed) == {("runs", 0): 6, ("runs", 1): 0}


def test_revoked_partitions_lose_their_series() -> None:
    registry = CollectorRegistry()
    metrics = StatsMetrics(registry)
    metrics.record_lag("g", {("runs", 0): 5, ("runs", 1): 2})
    metrics.record_lag("g", {("runs", 1): 1})
    shown = {
        (s.labels["topic"], s.labels["partition"]): s.value
        for family in registry.collect()
        if family.name == LAG_METRIC
        for s in family.samples
    }
    assert shown == {("runs", "1"): 1}
