"""Prometheus metrics of the orchestrator, on a registry of its own (several per test process)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slotflow.kafka.lag import ConsumerLag


class OrchestratorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.inputs = Counter(
            "slotflow_orchestrator_inputs_total",
            "Inputs recorded for a decision (commands, activity outcomes, fired timers), by type",
            ["type"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "slotflow_orchestrator_decisions_total",
            "Decision transactions, by outcome (appended, unchanged, lease_lost, failed)",
            ["outcome"],
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "slotflow_orchestrator_decision_seconds",
            "Time of one decision transaction, lease check to commit",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.history_events = Counter(
            "slotflow_orchestrator_history_events_total",
            "History events appended, by type",
            ["type"],
            registry=self.registry,
        )
        self.commands = Counter(
            "slotflow_orchestrator_commands_total",
            "Workflow commands answered, by type and answer (accepted, rejected)",
            ["type", "answer"],
            registry=self.registry,
        )
        self.non_determinism = Counter(
            "slotflow_orchestrator_non_determinism_total",
            "Replays that diverged from their history (the workflow is stuck until a fix is deployed)",
            registry=self.registry,
        )
        self.outbox_backlog = Gauge(
            "slotflow_orchestrator_outbox_backlog",
            "Events staged in the orchestrator's outbox and not yet published (history, activities' "
            "JobDue, timers, answers)",
            registry=self.registry,
        )
        self.shards_owned = Gauge(
            "slotflow_orchestrator_shards_owned",
            "Command-topic partitions whose lease this orchestrator holds",
            registry=self.registry,
        )
        self.leases_lost = Counter(
            "slotflow_orchestrator_leases_lost_total",
            "Decisions refused because another orchestrator took the shard (a zombie's decision, refused by the lease token)",
            registry=self.registry,
        )
        self.poison = Counter(
            "slotflow_orchestrator_poison_total",
            "Records the orchestrator's consumer parked in the DLQ, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.refused = Counter(
            "slotflow_orchestrator_refused_inputs_total",
            "Activity outcomes and timer firings their issuer's record does not back (slotflow.issuers), "
            "parked in the DLQ with the workflow untouched; by reason (unproven_outcome, unproven_timer) "
            "and the rule broken (run_id, no_record, fence, attempt, state, handler, timer_id, "
            "not_started, early)",
            ["reason", "rule"],
            registry=self.registry,
        )
        self.histories_purged = Counter(
            "slotflow_orchestrator_histories_purged_total",
            "Closed workflows whose history rows the retention purged (the history topic keeps them)",
            registry=self.registry,
        )
        #: `slotflow_kafka_consumer_lag{group,topic,partition}`, fed by every consumer's poll.
        self.consumer_lag = ConsumerLag(self.registry)
