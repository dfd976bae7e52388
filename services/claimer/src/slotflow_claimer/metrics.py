"""Prometheus metrics of one claimer, on its own registry (several claimers can share a process)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slotflow.kafka.lag import ConsumerLag


class ClaimerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.claimed = Counter(
            "slotflow_claimer_runs_claimed",
            "Runs claimed, by how: a JobDue (intake), a lease takeover, or a buffered start",
            ["how"],
            registry=r,
        )
        # One counter for every way a run's attempt (or a run that never started) ends, so a
        # dashboard divides and stacks them without knowing a list of names: `completed`,
        # `retrying` (the attempt raised, a retry timer is set), `dead_lettered` (the attempt raised
        # and the run was given up: `reason` is the DLQ reason), `cancelled`, `held` (a downstream
        # held the attempt and gave it back: `reason` is why), `skipped` (the overlap policy never
        # started the run: `reason` overlap or superseded). Failed attempts are retrying +
        # dead_lettered.
        self.outcomes = Counter(
            "slotflow_claimer_run_outcomes",
            "Run outcomes recorded: one per attempt that ended, and one per run its overlap policy skipped",
            ["outcome", "reason"],
            registry=r,
        )
        self.buffered = Counter(
            "slotflow_claimer_runs_buffered", "Runs buffered by overlap policy", registry=r
        )
        self.duplicates = Counter(
            "slotflow_claimer_jobdue_duplicates",
            "JobDue records whose run was already running elsewhere, finished or buffered (no claim)",
            registry=r,
        )
        self.poison = Counter(
            "slotflow_claimer_jobdue_poison", "JobDue records dead-lettered as poison", registry=r
        )
        self.fence_rejected = Counter(
            "slotflow_claimer_fence_rejected",
            "Writes refused because a newer fencing token exists: outcome (the run row), handler (user "
            "tables) or heartbeat (an activity heartbeat, `ctx.heartbeat`)",
            ["write"],
            registry=r,
        )
        self.leases_lost = Counter(
            "slotflow_claimer_leases_lost",
            "Handlers cancelled because their lease was taken over",
            registry=r,
        )
        self.takeovers = Counter(
            "slotflow_claimer_takeovers", "Runs taken over from a claimer whose lease expired", registry=r
        )
        self.released = Counter("slotflow_claimer_leases_released", "Leases released at shutdown", registry=r)
        self.outbox_backlog = Gauge(
            "slotflow_claimer_outbox_backlog",
            "Events staged in the claimer's outbox and not yet published (run events, retry timers)",
            registry=r,
        )
        self.in_flight = Gauge(
            "slotflow_claimer_runs_in_flight", "Runs claimed and not yet recorded", registry=r
        )
        self.handler_seconds = Histogram(
            "slotflow_claimer_handler_duration_seconds",
            "Handler wall time per attempt",
            ["handler", "outcome"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900),
        )

        self.downstream_held = Counter(
            "slotflow_claimer_downstream_held",
            "Attempts held, by downstream and reason "
            "(circuit_open, operator_open, probing, budget_exhausted, slot_order)",
            ["downstream", "reason"],
            registry=r,
        )
        self.downstream_state = Gauge(
            "slotflow_claimer_downstream_circuit_state",
            "Circuit state this claimer last saw move: 0 closed, 1 half-open, 2 open",
            ["downstream"],
            registry=r,
        )
        self.downstream_transitions = Counter(
            "slotflow_claimer_downstream_transitions",
            "Circuit state changes this claimer made, by downstream and new state",
            ["downstream", "to"],
            registry=r,
        )
        self.downstream_resumed = Counter(
            "slotflow_claimer_downstream_resumed",
            "Held runs brought forward (in slot order) when their downstream closed",
            ["downstream"],
            registry=r,
        )
        self.downstream_commands = Counter(
            "slotflow_claimer_downstream_commands",
            "Operator commands on downstreams, by type and outcome (accepted, rejected)",
            ["command", "outcome"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "slotflow_claimer_loop_lag_seconds",
            "How late the event loop woke a timer: a blocked loop stops heartbeats too",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.loop_blocked = Counter(
            "slotflow_claimer_loop_blocked",
            "Stalls of the event loop past the threshold, by the handler found on the loop's stack",
            ["handler"],
            registry=r,
        )
        #: `slotflow_kafka_consumer_lag{group,topic,partition}`, fed by every consumer's poll.
        self.consumer_lag = ConsumerLag(r)

    def outcomes_of(self, outcome: str) -> float:
        """How many run outcomes of one kind were counted, whatever their reason; for tests."""
        return sum(
            sample.value
            for family in self.outcomes.collect()
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels.get("outcome") == outcome
        )

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when never observed); for tests and benchmarks."""
        found = self.registry.get_sample_value(name, labels or {})
        return float(found) if found is not None else 0.0
