"""DLQ service settings from the environment (prefix SLOTFLOW_DLQ_); no I/O at import."""

import os
import socket
from typing import Any

from pydantic import AnyHttpUrl, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow.logs import register_dsn, register_secret
from slotflow.principals import SignatureSettings
from slotflow.settings import KafkaSettings, PostgresSettings, WorkerSettings


def _default_instance() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class DlqSettings(WorkerSettings):
    """How one DLQ service replica runs; replicas share the schema and split the partitions."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_DLQ_", extra="ignore")

    #: Names this replica in envelopes and client ids; unique per process.
    instance_id: str = Field(default_factory=_default_instance, pattern=r"^[A-Za-z0-9._:-]{1,150}$")
    #: The PostgreSQL schema that holds the letters, outbox and inbox.
    db_schema: str = Field(default="dlq", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Consumer groups (prefixed by the topic namespace when one is set).
    messages_group: str = "slotflow.dlq.messages"
    #: The consumer group of redrive and discard commands.
    commands_group: str = "slotflow.dlq.commands"
    #: Redrive requests of the dlq's own poison (records its own consumers refused).
    redrives_group: str = "slotflow.dlq.redrives"
    #: Where to POST a summary of each dead-lettered run tagged `money_moving_tag`; unset: no hook.
    webhook_url: AnyHttpUrl | None = None
    #: Runs tagged with this are the ones the webhook reports when they dead-letter.
    money_moving_tag: str = "money-moving"
    #: Bounds each connect, write and read of a delivery (httpx's timeout).
    webhook_timeout_seconds: float = Field(default=5.0, gt=0, le=120)
    #: Bounds a whole delivery, however slowly the receiver drips its answer.
    webhook_deadline_seconds: float = Field(default=10.0, gt=0, le=300)
    #: Deliveries in flight at once: a slow receiver holds one place, not the others.
    webhook_concurrency: int = Field(default=8, ge=1, le=256)
    #: Key of the HMAC-SHA256 signature sent in X-Slotflow-Signature; unset: bodies are unsigned.
    webhook_secret: SecretStr | None = None
    #: Deliveries per notification before it is given up (recorded, and counted in a metric).
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    #: Full-jitter back-off between deliveries: random(0, min(cap, base * 2**attempt)).
    webhook_backoff_base_seconds: float = Field(default=1.0, gt=0)
    #: The longest back-off between two deliveries of one notification.
    webhook_backoff_cap_seconds: float = Field(default=300.0, gt=0)
    #: How often the notifier looks for notifications to deliver.
    notifier_poll_seconds: float = Field(default=0.5, gt=0)
    #: Days a redriven or discarded letter is kept after its status last changed; 0 keeps all.
    retention_days: float = Field(default=30.0, ge=0)
    #: Days a letter nobody resolved is kept after it was first parked; 0 (default) keeps it.
    parked_retention_days: float = Field(default=0.0, ge=0)
    #: How often letters past their retention are purged.
    purge_interval_seconds: float = Field(default=300.0, gt=0)
    #: Rows deleted per purge statement (short transactions).
    purge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    #: How often the oldest-parked-age and parked gauges are refreshed from the table.
    gauge_seconds: float = Field(default=5.0, gt=0)
    #: Connections in the dlq's pool (parking, commands, the relay, the notifier).
    pool_size: int = Field(default=6, ge=2, le=200)
    #: Testing only: hold each parked batch this long before its offsets are committed, widening
    #: the window a crash must land in to leave letters parked but not committed (chaos tests).
    crash_window_seconds: float = Field(default=0.0, ge=0, le=60)
    #: Letters parked per transaction at most.
    max_poll_records: int = Field(default=200, ge=1, le=10_000)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        # The signing key, and a password in the webhook URL, are masked in every log line.
        register_secret(self.webhook_secret)
        if self.webhook_url is not None:
            register_dsn(str(self.webhook_url))


class Settings(BaseSettings):
    """Everything a DLQ replica reads from the environment, as every service takes it."""

    dlq: DlqSettings = Field(default_factory=DlqSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    #: Whether the DLQ's commands must be signed (redrive and discard are an operator's).
    signatures: SignatureSettings = Field(default_factory=SignatureSettings)
