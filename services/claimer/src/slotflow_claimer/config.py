"""Settings of the claimer (env prefix SLOTFLOW_CLAIMER_); no I/O at import."""

import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow.core.downstreams import DownstreamPolicy
from slotflow.logs import register_dsn
from slotflow.principals import SignatureSettings
from slotflow.settings import KafkaSettings, PostgresSettings, WorkerSettings, env_names


def _default_claimer_id() -> str:
    # Unique per process: two claimers on one host must never share an owner name, or one could
    # renew the other's lease.
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


#: jobs.due keeps records 7 days; a run's row must outlive any JobDue that could come back.
MIN_RUN_RETENTION_DAYS = 8


class ClaimerSettings(WorkerSettings):
    """How one claimer process claims, runs and records runs."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_CLAIMER_", extra="ignore")

    #: The owner name written on leases; unique per process.
    claimer_id: str = Field(default_factory=_default_claimer_id, min_length=1, max_length=200)
    #: The PostgreSQL schema that holds runs, outbox and inbox.
    db_schema: str = Field(default="claimer", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: The ticker's schema, in the same database: an operator's re-run (RerunSlots) is taken only
    #: when `rerun_issued` there says the ticker recorded it (USAGE on that schema, no table rights).
    ticker_schema: str = Field(default="ticker", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: The orchestrator's schema, in the same database: a workflow's cancel of an activity
    #: (CancelActivity) is taken only when `activity_cancel_issued` there says the orchestrator
    #: recorded it (USAGE on that schema, no table rights).
    orchestrator_schema: str = Field(default="orchestrator", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Consumer group over the JobDue topic (prefixed with the topic namespace when one is set).
    group_id: str = "slotflow-claimer"
    #: Comma-separated module paths imported at start-up; their @handler decorators register.
    handler_modules: str = ""
    #: Database for handlers' own tables (RunContext.pool); empty means the claimer's database.
    handler_dsn: str = ""  # its password is masked in logs (model_post_init)
    #: Connections the handlers' pool (RunContext.pool) opens at most.
    handler_pool_max_size: int = Field(default=10, ge=1)
    #: Runs claimed and not yet recorded, per claimer; also the largest claim batch. What every
    #: claimer benchmark runs with: under load, larger claim and outcome batches cost less CPU a
    #: run in the claimer and in PostgreSQL (docs/benchmarks/orchestrator.md: 64 to 256).
    max_in_flight: int = Field(default=256, ge=1, le=10_000)
    #: How long a claim lasts without a heartbeat (database clock).
    lease_ttl_seconds: float = Field(default=30.0, gt=0)
    #: A run whose lease lapsed this often (its claimer died or froze while running it) is
    #: dead-lettered as `quarantined` on the next takeover instead of being started again: a
    #: handler that kills its process would otherwise take down every claimer in turn. A lease a
    #: live claimer lost because the database was unreachable, or because its process froze
    #: (stopped or starved of CPU, no handler blocking its loop; needs the loop watchdog), is
    #: excused, not counted.
    max_lease_lapses: int = Field(default=3, ge=1)
    #: Retry budget per downstream (docs/claimer.md): retries at most this fraction of the first
    #: attempts over the window, plus `downstream_min_retries_per_second` regardless of traffic.
    downstream_retry_ratio: float = Field(default=0.2, ge=0)
    #: Retries a downstream may always spend, whatever its traffic.
    downstream_min_retries_per_second: float = Field(default=1.0, ge=0)
    #: The window over which a downstream's attempts, failures and retries are counted.
    downstream_window_seconds: float = Field(default=10.0, gt=0)
    #: Circuit breaker per downstream: opens when this fraction of the window's calls failed (with
    #: at least `downstream_min_volume` of them), stays open for the cool-down, then lets
    #: `downstream_probes` attempts through; one success closes it, one failure opens it again.
    downstream_failure_rate: float = Field(default=0.5, gt=0, le=1)
    #: Attempts in the window before a downstream's failure rate can open its breaker.
    downstream_min_volume: int = Field(default=10, ge=1)
    #: How long an open breaker holds a downstream's runs before probing it.
    downstream_cooldown_seconds: float = Field(default=10.0, gt=0)
    #: Attempts let through a half-open breaker to probe the downstream.
    downstream_probes: int = Field(default=1, ge=1)
    #: How often each downstream's state, window and held runs are reported (DownstreamReported,
    #: for the api's views); one claimer reports each downstream per interval. 0 turns it off.
    downstream_report_interval_seconds: float = Field(default=10.0, ge=0)
    #: Consumer group over the downstream commands topic (one claimer applies each command).
    downstream_commands_group_id: str = "slotflow-claimer-downstream-commands"
    #: Consumer group over the workflows' activity cancels (one claimer applies each; the one
    #: running the activity learns of it from the run's row).
    activity_cancels_group_id: str = "slotflow-claimer-activity-cancels"
    #: Consumer group over the dlq's redrive requests (docs/decisions/0009).
    redrives_group_id: str = "slotflow-claimer-redrives"
    #: Threads that run plain `def` handlers (a blocking call holds one; more wait for a free one).
    handler_threads: int = Field(default=16, ge=1, le=1024)
    #: Processes for handlers registered with runs_in="process"; 0 means one per CPU.
    handler_processes: int = Field(default=0, ge=0, le=256)
    #: An event loop stalled this long is logged with the handler found blocking it; 0 turns the
    #: watchdog off.
    loop_block_threshold_seconds: float = Field(default=0.5, ge=0)
    #: How often leases are extended; default a third of the TTL.
    heartbeat_interval_seconds: float | None = Field(default=None, gt=0)
    #: How often the reaper looks for expired leases; default min(1 s, TTL / 4).
    reaper_interval_seconds: float | None = Field(default=None, gt=0)
    #: How often the claimer announces the handlers it serves (ClaimerAnnounced), so the api can
    #: warn about a schedule whose handler no live claimer serves.
    announce_interval_seconds: float = Field(default=30.0, gt=0)
    #: How often consumed offsets are committed (only ever up to records whose runs are durable).
    commit_interval_seconds: float = Field(default=0.2, ge=0)
    #: Most outcomes recorded in one transaction.
    outcome_batch: int = Field(default=500, ge=1)
    #: On SIGTERM, how long running handlers may finish before they are cancelled and released.
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    #: How long one poll of jobs.due waits for records.
    poll_timeout_ms: int = Field(default=200, ge=1)
    #: Days an ended run (completed, skipped, cancelled) is kept; 0 keeps every run. At least 8:
    #: the row is the run's dedupe key and jobs.due keeps records 7 days (docs/claimer.md).
    run_retention_days: float = Field(default=30.0, ge=0)
    #: How often finished runs past their retention and old inbox ids are purged.
    purge_interval_seconds: float = Field(default=300.0, gt=0)
    #: Rows deleted per purge statement (short transactions).
    purge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    #: Connections in the claimer's pool (intake, outcomes, relay); formerly POOL_MAX_SIZE.
    pool_size: int = Field(
        default=10,
        ge=2,
        le=200,
        validation_alias=env_names("SLOTFLOW_CLAIMER_POOL_SIZE", "SLOTFLOW_CLAIMER_POOL_MAX_SIZE"),
    )

    @model_validator(mode="after")
    def _heartbeat_inside_lease(self) -> "ClaimerSettings":
        if (
            self.heartbeat_interval_seconds is not None
            and self.heartbeat_interval_seconds >= self.lease_ttl_seconds
        ):
            raise ValueError("heartbeat_interval_seconds must be shorter than lease_ttl_seconds")
        return self

    @model_validator(mode="after")
    def _retention_outlasts_the_topic(self) -> "ClaimerSettings":
        if 0 < self.run_retention_days < MIN_RUN_RETENTION_DAYS:
            raise ValueError(
                f"run_retention_days must be 0 (keep every run) or at least {MIN_RUN_RETENTION_DAYS}: "
                "a JobDue replayed from the 7-day jobs.due topic after its run was purged would run again"
            )
        return self

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        register_dsn(self.handler_dsn)

    @property
    def heartbeat_interval(self) -> float:
        return self.heartbeat_interval_seconds or self.lease_ttl_seconds / 3

    @property
    def reaper_interval(self) -> float:
        return self.reaper_interval_seconds or min(1.0, self.lease_ttl_seconds / 4)

    def downstream_policy(self) -> DownstreamPolicy:
        return DownstreamPolicy(
            retry_ratio=self.downstream_retry_ratio,
            min_retries_per_second=self.downstream_min_retries_per_second,
            window=timedelta(seconds=self.downstream_window_seconds),
            failure_rate=self.downstream_failure_rate,
            min_volume=self.downstream_min_volume,
            cooldown=timedelta(seconds=self.downstream_cooldown_seconds),
            probes=self.downstream_probes,
        )

    def modules(self) -> list[str]:
        return [m.strip() for m in self.handler_modules.split(",") if m.strip()]


class Settings(BaseSettings):
    """Everything the service reads from the environment."""

    claimer: ClaimerSettings = Field(default_factory=ClaimerSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    #: Whether downstream commands must be signed, and the key the claimer signs its timers with.
    signatures: SignatureSettings = Field(default_factory=SignatureSettings)

    def group_id(self) -> str:
        return self._namespaced(self.claimer.group_id)

    def downstream_commands_group_id(self) -> str:
        return self._namespaced(self.claimer.downstream_commands_group_id)

    def redrives_group_id(self) -> str:
        return self._namespaced(self.claimer.redrives_group_id)

    def activity_cancels_group_id(self) -> str:
        return self._namespaced(self.claimer.activity_cancels_group_id)

    def _namespaced(self, group: str) -> str:
        return self.kafka.consumer_group(group)
