"""Prometheus metrics of the stats worker, on a registry of its own, served by its health listener
(`GET /metrics`, slotflow_stats.health) like every slotflow service's.

What an operator watches: events counted per family and events left out (undecodable, older than
a window's expiry, redelivered), windows copied to PostgreSQL and failed copies, when the last
copy succeeded, and the consumer lag of the source topics (`slotflow_kafka_consumer_lag`, the
library's name and labels, so one dashboard panel shows every service's lag).

No faust import: this module loads in the durable core's environment too (tests, mypy).
"""

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

#: The library's consumer lag metric (slotflow.kafka.lag.LAG_METRIC; the worker cannot import the
#: library, decision 0005): tests/unit/stats checks the two agree.
LAG_METRIC = "slotflow_kafka_consumer_lag"


class StatsMetrics:
    """The worker's counters and gauges; `render` is what `GET /metrics` answers."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "slotflow_stats_events",
            "Events counted into the windowed tables, by family (runs, schedules, dlq)",
            ["family"],
            registry=r,
        )
        self.skipped = Counter(
            "slotflow_stats_events_skipped",
            "Events left out, by reason: undecodable, too_old (older than a window's expiry), "
            "redelivered (already counted before a crash)",
            ["reason"],
            registry=r,
        )
        self.windows_copied = Counter(
            "slotflow_stats_windows_copied",
            "Window rows copied to PostgreSQL (a window copied again after a change counts again)",
            registry=r,
        )
        self.copy_failures = Counter(
            "slotflow_stats_copy_failures",
            "Copies to PostgreSQL that failed (retried at the next flush)",
            registry=r,
        )
        self.last_copy = Gauge(
            "slotflow_stats_last_copy_timestamp_seconds",
            "When a copy to PostgreSQL last succeeded (Unix time; 0 before the first)",
            registry=r,
        )
        self.lag = Gauge(
            LAG_METRIC,
            "Records a consumer is behind per partition it owns: the partition's end minus the "
            "offset it committed",
            ["group", "topic", "partition"],
            registry=r,
        )
        self._lag_shown: set[tuple[str, int]] = set()
        for family in ("runs", "schedules", "dlq"):
            self.events.labels(family)
        for reason in ("undecodable", "too_old", "redelivered"):
            self.skipped.labels(reason)

    def record_lag(self, group: str, lags: Mapping[tuple[str, int], int]) -> None:
        """This worker's lag per (topic, partition); partitions it no longer owns go."""
        for topic, partition in self._lag_shown - lags.keys():
            self.lag.remove(group, topic, str(partition))
        for (topic, partition), behind in lags.items():
            self.lag.labels(group, topic, str(partition)).set(behind)
        self._lag_shown = set(lags)

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def source_lags(
    partitions: Iterable[tuple[str, int]],
    topics: set[str],
    end: Mapping[tuple[str, int], int | None],
    committed: Mapping[tuple[str, int], int | None],
) -> dict[tuple[str, int], int]:
    """Records behind per owned partition of the source ``topics`` (changelog partitions are the
    worker's own state, not lag): the end a fetch reported minus the committed offset; a partition
    without both is left out until it has them."""
    behind: dict[tuple[str, int], int] = {}
    for key in partitions:
        if key[0] not in topics:
            continue
        last, done = end.get(key), committed.get(key)
        if last is None or done is None:
            continue
        behind[key] = max(0, last - done)
    return behind
