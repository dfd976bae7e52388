"""Prometheus metrics of one api process, in their own registry (several apps may share a process)."""

from prometheus_client import CollectorRegistry, Counter, Histogram

from slotflow.kafka.lag import ConsumerLag


class Metrics:
    """The api's counters and histograms; `/metrics` renders `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "slotflow_api_requests",
            "HTTP requests served, by route template and status code",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "slotflow_api_request_seconds",
            "HTTP request latency by route template",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.commands_published = Counter(
            "slotflow_api_commands_published",
            "Commands published to Kafka over HTTP, by type",
            ["type"],
            registry=self.registry,
        )
        self.events_projected = Counter(
            "slotflow_api_events_projected",
            "Records the projector wrote into the read model (redeliveries included), by type",
            ["type"],
            registry=self.registry,
        )
        self.projection_lag = Histogram(
            "slotflow_api_projection_lag_seconds",
            "Kafka record timestamp to read-model commit",
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        #: `slotflow_kafka_consumer_lag{group,topic,partition}`, fed by every consumer's poll.
        self.consumer_lag = ConsumerLag(self.registry)
