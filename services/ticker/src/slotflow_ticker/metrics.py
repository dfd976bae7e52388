"""Prometheus metrics of one ticker replica (its own registry, so replicas can share a process)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

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
        self.lateness = Histogram(
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
        self.wheel_pending = Gauge(
            "slotflow_ticker_wheel_pending", "Deadlines held in the in-memory timing wheel", registry=r
        )

    def serve(self, port: int, host: str) -> None:
        """Expose /metrics over HTTP (a daemon thread of prometheus_client)."""
        start_http_server(port, addr=host, registry=self.registry)
