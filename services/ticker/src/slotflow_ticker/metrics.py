"""Prometheus metrics of one ticker replica (its own registry, so replicas can share a process)."""

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from slotflow.kafka.lag import ConsumerLag

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class TickerMetrics:
    """Slots fired and skipped, firing lateness, claim batch sizes, outbox backlog, commands."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.slots_fired = Counter(
            "slotflow_ticker_slots_fired", "JobDue staged per slot", ["kind"], registry=r
        )
        self.slots_skipped = Counter(
            "slotflow_ticker_slots_skipped", "SlotSkipped staged per slot", ["reason"], registry=r
        )
        self.lateness = CountedHistogram(
            "slotflow_ticker_fire_lateness_seconds",
            "Database time when a slot's JobDue was staged minus the slot's fire time (slot + jitter)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.claim_batch = Histogram(
            "slotflow_ticker_claim_batch_size",
            "Schedules claimed per transaction",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.claim_seconds = Histogram(
            "slotflow_ticker_claim_seconds",
            "Duration of one claim transaction",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.timers_fired = Counter(
            "slotflow_ticker_timers_fired", "Durable timers fired", ["action"], registry=r
        )
        self.outbox_backlog = Gauge(
            "slotflow_ticker_outbox_backlog", "Outbox rows staged but not yet published", registry=r
        )
        self.outbox_published = Counter(
            "slotflow_ticker_outbox_published", "Outbox rows published by this replica's relay", registry=r
        )
        self.commands = Counter(
            "slotflow_ticker_commands", "Schedule and timer commands handled", ["type", "outcome"], registry=r
        )
        self.public_timer_commands = Counter(
            "slotflow_ticker_public_timer_commands",
            "StartTimer/CancelTimer found on the public command topic: refused, or accepted while "
            "LEGACY_TIMER_COMMANDS lets a rolling upgrade finish",
            ["outcome"],
            registry=r,
        )
        self.cron_rules_paused = Counter(
            "slotflow_ticker_cron_rules_paused",
            "Stored schedules paused at review because their cron expression reads differently now",
            registry=r,
        )
        self.wheel_pending = Gauge(
            "slotflow_ticker_wheel_pending", "Deadlines held in the in-memory timing wheel", registry=r
        )
        #: `slotflow_kafka_consumer_lag{group,topic,partition}`, fed by every consumer's poll.
        self.consumer_lag = ConsumerLag(r)

    def serve(self, port: int, host: str) -> None:
        """Expose /metrics over HTTP (a daemon thread of prometheus_client)."""
        start_http_server(port, addr=host, registry=self.registry)


class CountedHistogram(Collector):
    """A histogram that takes many observations of one value at once.

    A claim stages hundreds of slots that share a handful of fire times (schedules due together),
    so it observes each distinct lateness once with its count: prometheus_client's `observe` per
    slot cost more than planning the slot. Exposed exactly as a `Histogram` of the same name.
    """

    def __init__(
        self, name: str, documentation: str, *, buckets: Iterable[float], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = [float(b) for b in buckets]
        if self._bounds != sorted(self._bounds) or len(set(self._bounds)) != len(self._bounds):
            raise ValueError("histogram buckets must be strictly increasing")
        self._counts = [0] * (len(self._bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()  # the metrics HTTP thread reads while the loop writes
        registry.register(self)

    def observe(self, amount: float, count: int = 1) -> None:
        """``count`` observations of ``amount`` (a bucket's bound is inclusive, as in Prometheus)."""
        index = bisect_left(self._bounds, amount)
        with self._lock:
            self._counts[index] += count
            self._sum += amount * count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip([*self._bounds, float("inf")], counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
        family = HistogramMetricFamily(self._name, self._documentation)
        family.add_metric([], buckets, total)
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self._name, self._documentation)
