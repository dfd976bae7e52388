"""Ticker settings from the environment (prefix SLOTFLOW_TICKER_); no I/O at import."""

import os
import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow.principals import SignatureSettings
from slotflow.settings import KafkaSettings, PostgresSettings, WorkerSettings


def _default_ticker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class TickerSettings(WorkerSettings):
    """How one ticker replica runs. Any number of replicas share one schema; none is a leader."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_TICKER_", extra="ignore")

    #: Names this replica in envelopes (`source`) and client ids; unique per process.
    ticker_id: str = Field(default_factory=_default_ticker_id, pattern=r"^[A-Za-z0-9._:-]{1,150}$")
    #: The PostgreSQL schema that holds schedules, timers, outbox and inbox.
    db_schema: str = Field(default="ticker", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Kafka consumer group for the command topics (prefixed by the topic namespace); the dlq's
    #: redrive requests are read in `{group_id}.redrives`.
    group_id: str = "slotflow.ticker"
    #: Accept StartTimer and CancelTimer from the public schedule-command topic too. Only for a
    #: rolling upgrade from a version whose claimers and orchestrators published them there
    #: (docs/operations.md, "Upgrading to the internal timer topic"): while on, any client that may
    #: write the public topic can start and cancel timers, which is the hole the internal topic
    #: closes. Off, they are refused with CommandRejected ("timer commands are internal").
    legacy_timer_commands: bool = False
    #: Schedules (and timers) claimed per transaction with FOR UPDATE SKIP LOCKED.
    batch_size: int = Field(default=500, ge=1, le=20_000)
    #: Claim transactions run at once while a backlog lasts (each takes different rows).
    claim_concurrency: int = Field(default=2, ge=1, le=16)
    #: Most slots one Backfill may emit, whatever its own max_slots asks for (a backfill is
    #: emitted at once, and can be repeated at will): a wider range is refused with this number.
    max_backfill_slots: int = Field(default=10_000, ge=1, le=100_000)
    #: Most slots one schedule handles per claim; a longer backlog continues in the next claim.
    max_slots_per_claim: int = Field(default=1000, ge=1, le=100_000)
    #: Rows due within this many seconds are held in the in-memory timing wheel.
    horizon_seconds: float = Field(default=2.0, gt=0, le=300)
    #: How often the table is asked for the next horizon (also the fallback poll); default horizon/2.
    reload_seconds: float | None = Field(default=None, gt=0, le=300)
    #: The timing wheel's resolution: how often a due row can be noticed.
    wheel_tick_ms: float = Field(default=1.0, gt=0, le=1000)
    #: Buckets per level of the timing wheel.
    wheel_size: int = Field(default=64, ge=2, le=4096)
    #: Outbox rows the relay sends per transaction at most.
    relay_batch_size: int = Field(default=1000, ge=1, le=50_000)
    #: The relay is woken after every commit that staged rows; this idle poll only catches rows
    #: another replica staged and could not relay (it crashed), so it can be slow.
    relay_idle_seconds: float = Field(default=0.5, gt=0, le=60)
    #: Relay every free outbox shard in one transaction per pass (OutboxRelay one_transaction):
    #: a pass costs five round trips whatever the number of shards with rows.
    relay_one_transaction: bool = True
    #: Without one_transaction: relay the shards of a pass concurrently, a transaction each.
    relay_parallel_shards: bool = False
    #: Independent relay loops, each on its own outbox shards (round robin): a pass waiting for
    #: the broker's acknowledgements then holds back only its own shards' rows.
    relay_loops: int = Field(default=1, ge=1, le=8)
    #: Apply each polled batch of commands in one transaction (off: one transaction per command,
    #: the fallback path; kept switchable so the two can be compared in the same run).
    command_batching: bool = True
    #: Most command records one poll hands to a batch transaction.
    command_batch_size: int = Field(default=500, ge=1, le=10_000)
    #: Kafka keeps commands for 7 days, so an inbox entry older than this cannot see a redelivery.
    inbox_retention_days: float = Field(default=8.0, gt=0)
    #: Fired and cancelled timers are kept this long so a late duplicate StartTimer stays a no-op.
    timer_retention_days: float = Field(default=30.0, gt=0)
    #: How often processed inbox ids and old timers are purged and rows under older rules reviewed.
    housekeeping_seconds: float = Field(default=300.0, gt=0)
    #: How often the outbox backlog gauge is refreshed.
    backlog_seconds: float = Field(default=5.0, gt=0)
    #: Claims, commands, the wheel's horizon loads and the relay's shards share this pool.
    pool_size: int = Field(default=16, ge=2, le=200)
    #: Fault injection for chaos tests only: hold each claim transaction open this long after
    #: staging, so a kill lands inside it. Never set in production.
    debug_hold_claim_ms: float = Field(default=0.0, ge=0, le=60_000)

    @property
    def reload_interval(self) -> float:
        return self.reload_seconds if self.reload_seconds is not None else self.horizon_seconds / 2


class Settings(BaseSettings):
    """Everything a ticker replica reads from the environment, as every service takes it."""

    ticker: TickerSettings = Field(default_factory=TickerSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    #: Whether commands must be signed, and the key the ticker signs what it issues with.
    signatures: SignatureSettings = Field(default_factory=SignatureSettings)
