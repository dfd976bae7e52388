"""Settings of the stats processor: the same SLOTFLOW_KAFKA_* and SLOTFLOW_PG_* variables as every
slotflow service, read by the very same classes (`slotflow_base.settings`), so the worker checks
them the same way and registers their secrets for masking in its logs like every service."""

import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings

from slotflow_base.settings import KafkaConnection, PostgresSettings
from slotflow_base.stats.settings import StatsSchemaSettings

# The topic table's names (slotflow.contracts.topics); tests/unit/stats checks they agree.
RUN_EVENTS = "slotflow.runs.events.v1"
JOBS_DUE = "slotflow.jobs.due.v1"
SCHEDULE_EVENTS = "slotflow.schedules.events.v1"
DLQ_EVENTS = "slotflow.dlq.events.v1"


class StatsSettings(StatsSchemaSettings):
    """What the processor needs besides Kafka and PostgreSQL (env prefix SLOTFLOW_STATS_); the
    schema it writes (`db_schema`) is the api's setting too, hence defined in slotflow_base."""

    #: faust's app id: the consumer group and the prefix of its changelog topics (after the
    #: topic namespace, so test runs sharing a broker never share state).
    app_name: str = Field(default="slotflow-stats", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    #: How often changed windows are copied to PostgreSQL.
    flush_interval_seconds: float = Field(default=1.0, gt=0)
    #: How long windows stay in the tables (and their changelogs) after their end; PostgreSQL
    #: keeps the copies.
    minute_window_expires_seconds: int = Field(default=2 * 3600, ge=60)
    #: How long an hour window stays in the worker's table before it expires (the copies in
    #: PostgreSQL stay).
    hour_window_expires_seconds: int = Field(default=3 * 86400, ge=3600)
    #: Where faust keeps its small local state (the tables themselves are in memory).
    data_dir: Path = Path(tempfile.gettempdir()) / "slotflow-stats"
    #: Replicas of each changelog topic (1 on the single-broker devstack; 3 on a real cluster).
    changelog_replication_factor: int = Field(default=1, ge=1)
    #: How often the consumer commits offsets (faust's broker_commit_interval).
    commit_interval_seconds: float = Field(default=1.0, gt=0)
    #: How long the group waits for a silent worker before its partitions move to the others
    #: (faust's broker_session_timeout): a worker killed outright is waited for this long, by its
    #: replacement too, since the group rebalances only once the dead member's session ends.
    session_timeout_seconds: float = Field(default=60.0, ge=6, le=300)
    #: The health listener (/livez, /readyz; slotflow_stats.health): loopback unless exposed on
    #: purpose, like every slotflow listener; port 0 keeps it off.
    health_host: str = "127.0.0.1"
    #: Port of /livez, /readyz and /metrics; 0 keeps them off.
    health_port: int = Field(default=0, ge=0, le=65535)
    #: /readyz fails when no copy to PostgreSQL succeeded for this long.
    health_stale_after_seconds: float = Field(default=60.0, gt=0)


class Settings(BaseSettings):
    stats: StatsSettings = Field(default_factory=StatsSettings)
    kafka: KafkaConnection = Field(default_factory=KafkaConnection)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)

    @property
    def app_id(self) -> str:
        return self.kafka.consumer_group(self.stats.app_name)
