"""Consumer lag: how many records each consumer of a service is behind, per topic and partition.

`slotflow_kafka_consumer_lag{group, topic, partition}` is the end of the partition (its last stable
offset for a read_committed consumer: the records a consumer may read) minus the offset the
member committed there, or its position before its first commit (a freshly assigned partition's
position is the group's committed offset). It is what a platform team alerts on: a lag that grows
is a consumer that fell behind its topic, whatever its own counters say.

Cheap by construction: `Consumer.poll` samples it at most every `SAMPLE_INTERVAL_SECONDS`, from what
the fetches already brought back (aiokafka keeps each partition's high watermark and last stable
offset from every fetch response) and the offsets this member committed itself: no broker round
trip, nothing per record. A partition not fetched yet has no known end and is left out until it
is; a partition that moves to another member is removed from this one's series.
"""

import time
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Gauge

#: The metric's name, the same in every service (the group label tells the services apart).
LAG_METRIC = "slotflow_kafka_consumer_lag"
#: How often a consumer's lag is sampled, at most (the poll loop's own rhythm otherwise).
SAMPLE_INTERVAL_SECONDS = 2.0

#: (topic, partition) -> records behind.
Lags = Mapping[tuple[str, int], int]


class ConsumerLag:
    """The lag gauge of one service's registry, fed by every consumer the service runs."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        interval: float = SAMPLE_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._gauge = Gauge(
            LAG_METRIC,
            "Records a consumer is behind per partition it owns: the partition's end (last stable "
            "offset) minus the offset it committed (its position before the first commit)",
            ["group", "topic", "partition"],
            registry=registry,
        )
        # The series each consumer last set, so one consumer's revoked partitions go and another
        # consumer's (of the same group, in the same process) stay.
        self._shown: dict[int, tuple[str, set[tuple[str, int]]]] = {}

    def record(self, owner: object, group: str, lags: Lags) -> None:
        """Set ``owner``'s (a consumer's) lags in ``group``; partitions it no longer has go."""
        key = id(owner)
        _, before = self._shown.get(key, (group, set()))
        for topic, partition in before - lags.keys():
            self._remove(group, topic, partition)
        for (topic, partition), behind in lags.items():
            self._gauge.labels(group, topic, str(partition)).set(behind)
        self._shown[key] = (group, set(lags))

    def forget(self, owner: object) -> None:
        """Remove every series ``owner`` set (it stopped: its partitions are someone else's now)."""
        group, before = self._shown.pop(id(owner), ("", set()))
        for topic, partition in before:
            self._remove(group, topic, partition)

    def _remove(self, group: str, topic: str, partition: int) -> None:
        self._gauge.remove(group, topic, str(partition))  # a series never set is no error


__all__ = ["LAG_METRIC", "SAMPLE_INTERVAL_SECONDS", "ConsumerLag", "Lags"]
