"""Prometheus metrics of the DLQ service, on a registry of its own (several services per test)."""

from prometheus_client import CollectorRegistry, Counter, Gauge

from slotflow.kafka.lag import ConsumerLag


class DlqMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.parked = Counter(
            "slotflow_dlq_parked_total",
            "Dead letters parked (new entries), by reason",
            ["reason"],
            registry=self.registry,
        )
        self.sightings = Counter(
            "slotflow_dlq_repeat_sightings_total",
            "Dead letters whose origin was already parked (re-sent, or refused by another group)",
            registry=self.registry,
        )
        self.redrives = Counter(
            "slotflow_dlq_redrives_total",
            "Redrive requests staged for the letters' owners, by the service asked",
            ["target"],
            registry=self.registry,
        )
        self.redrive_outcomes = Counter(
            "slotflow_dlq_redrive_outcomes_total",
            "Redrives answered: done or refused (by an owner, or by the dlq finding no owner)",
            ["outcome"],
            registry=self.registry,
        )
        self.oldest_redriving_age = Gauge(
            "slotflow_dlq_oldest_redriving_age_seconds",
            "Age of the oldest redrive request still waiting for its owner's answer (0 when none)",
            registry=self.registry,
        )
        self.discards = Counter(
            "slotflow_dlq_discards_total", "Dead letters discarded", registry=self.registry
        )
        self.parked_now = Gauge(
            "slotflow_dlq_parked_entries", "Entries parked now, by reason", ["reason"], registry=self.registry
        )
        self.outbox_backlog = Gauge(
            "slotflow_dlq_outbox_backlog",
            "Events staged in the DLQ service's outbox and not yet published (status changes, answers)",
            registry=self.registry,
        )
        self.oldest_parked_age = Gauge(
            "slotflow_dlq_oldest_parked_age_seconds",
            "Age of the oldest parked entry by the database clock (0 when none)",
            registry=self.registry,
        )
        self.notifications = Counter(
            "slotflow_dlq_notifications_total",
            "Webhook deliveries for money-moving runs, by outcome (delivered, failed, gave_up)",
            ["outcome"],
            registry=self.registry,
        )
        self.poison = Counter(
            "slotflow_dlq_own_poison_total",
            "Records the DLQ service's own consumers refused (parked through the DLQ topic)",
            ["reason"],
            registry=self.registry,
        )
        #: `slotflow_kafka_consumer_lag{group,topic,partition}`, fed by every consumer's poll.
        self.consumer_lag = ConsumerLag(self.registry)
