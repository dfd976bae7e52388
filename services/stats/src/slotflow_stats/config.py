"""Settings of the stats processor; the same SLOTFLOW_KAFKA_* and SLOTFLOW_PG_* variables as every
slotflow service, read here without the slotflow library (the worker's environment lacks it)."""

import tempfile
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# The topic table's names (slotflow.contracts.topics); tests/unit/stats checks they agree.
RUN_EVENTS = "slotflow.runs.events.v1"
JOBS_DUE = "slotflow.jobs.due.v1"
SCHEDULE_EVENTS = "slotflow.schedules.events.v1"
DLQ_EVENTS = "slotflow.dlq.events.v1"


class KafkaConnection(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_KAFKA_", extra="ignore")

    bootstrap: str = "127.0.0.1:19092"
    topic_namespace: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,100}$")

    def topic(self, name: str) -> str:
        return f"{self.topic_namespace}.{name}" if self.topic_namespace else name


class PostgresConnection(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_PG_", extra="ignore")

    dsn: str = "postgresql://slotflow@127.0.0.1:15432/slotflow"
    #: `SLOTFLOW_PG_PASSWORD`, as for every service; given, it takes precedence over the DSN's.
    password: SecretStr | None = None


class StatsSettings(BaseSettings):
    """What the processor needs besides Kafka and PostgreSQL (env prefix SLOTFLOW_STATS_)."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_STATS_", extra="ignore")

    #: faust's app id: the consumer group and the prefix of its changelog topics (after the
    #: topic namespace, so test runs sharing a broker never share state).
    app_name: str = Field(default="slotflow-stats", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    #: The PostgreSQL schema the tables are copied to (the api reads it).
    db_schema: str = Field(default="stats", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: How often changed windows are copied to PostgreSQL.
    flush_interval_seconds: float = Field(default=1.0, gt=0)
    #: How long windows stay in the tables (and their changelogs) after their end; PostgreSQL
    #: keeps the copies.
    minute_window_expires_seconds: int = Field(default=2 * 3600, ge=60)
    hour_window_expires_seconds: int = Field(default=3 * 86400, ge=3600)
    #: Where faust keeps its small local state (the tables themselves are in memory).
    data_dir: Path = Path(tempfile.gettempdir()) / "slotflow-stats"
    #: Replicas of each changelog topic (1 on the single-broker devstack; 3 on a real cluster).
    changelog_replication_factor: int = Field(default=1, ge=1)
    #: How often the consumer commits offsets (faust's broker_commit_interval).
    commit_interval_seconds: float = Field(default=1.0, gt=0)


class Settings(BaseSettings):
    stats: StatsSettings = Field(default_factory=StatsSettings)
    kafka: KafkaConnection = Field(default_factory=KafkaConnection)
    postgres: PostgresConnection = Field(default_factory=PostgresConnection)

    @property
    def app_id(self) -> str:
        namespace = self.kafka.topic_namespace
        return f"{namespace}.{self.stats.app_name}" if namespace else self.stats.app_name
