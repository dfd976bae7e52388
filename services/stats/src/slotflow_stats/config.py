"""Settings of the stats processor; the same SLOTFLOW_KAFKA_* and SLOTFLOW_PG_* variables as every
slotflow service, read here without the slotflow library (the worker's environment lacks it)."""

import ssl
import tempfile
from pathlib import Path
from typing import Any, Literal

from aiokafka.abc import AbstractTokenProvider
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The topic table's names (slotflow.contracts.topics); tests/unit/stats checks they agree.
RUN_EVENTS = "slotflow.runs.events.v1"
JOBS_DUE = "slotflow.jobs.due.v1"
SCHEDULE_EVENTS = "slotflow.schedules.events.v1"
DLQ_EVENTS = "slotflow.dlq.events.v1"


class KafkaConnection(BaseSettings):
    """The SLOTFLOW_KAFKA_* variables the library's KafkaSettings and KafkaSecurity read (the
    worker's environment lacks the library; docs/security.md, Kafka). OAUTHBEARER takes the static
    token only here (SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN), not a token provider."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_KAFKA_", extra="ignore")

    bootstrap: str = "127.0.0.1:19092"
    topic_namespace: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,100}$")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_oauth_token: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaConnection":
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(
                f"SLOTFLOW_KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs SLOTFLOW_KAFKA_SASL_MECHANISM"
            )
        if sasl and self.sasl_mechanism == "OAUTHBEARER" and self.sasl_oauth_token is None:
            raise ValueError("the stats worker takes OAUTHBEARER with SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN only")
        if (
            sasl
            and self.sasl_mechanism != "OAUTHBEARER"
            and (not self.sasl_username or self.sasl_password is None)
        ):
            raise ValueError(
                f"SLOTFLOW_KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs SASL_USERNAME and SASL_PASSWORD"
            )
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context = ssl.create_default_context(cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
        if self.ssl_certfile is not None:
            context.load_cert_chain(
                str(self.ssl_certfile),
                str(self.ssl_keyfile) if self.ssl_keyfile else None,
                self.ssl_key_password.get_secret_value() if self.ssl_key_password else None,
            )
        context.check_hostname = self.ssl_check_hostname
        return context

    def client_options(self) -> dict[str, Any]:
        """Bootstrap, TLS and SASL keyword arguments for an aiokafka client."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
        }
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.security_protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                options["sasl_oauth_token_provider"] = _StaticToken(self.sasl_oauth_token)
            else:
                options["sasl_plain_username"] = self.sasl_username
                options["sasl_plain_password"] = (
                    self.sasl_password.get_secret_value() if self.sasl_password else None
                )
        return options

    def topic(self, name: str) -> str:
        return f"{self.topic_namespace}.{name}" if self.topic_namespace else name


class _StaticToken(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's token provider for a static OAUTHBEARER token."""

    def __init__(self, token: SecretStr | None) -> None:
        self._token = token.get_secret_value() if token else ""

    async def token(self) -> str:
        return self._token


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
    #: The health listener (/livez, /readyz; slotflow_stats.health): loopback unless exposed on
    #: purpose, like every slotflow listener; port 0 keeps it off.
    health_host: str = "127.0.0.1"
    health_port: int = Field(default=0, ge=0, le=65535)
    #: /readyz fails when no copy to PostgreSQL succeeded for this long.
    health_stale_after_seconds: float = Field(default=60.0, gt=0)


class Settings(BaseSettings):
    stats: StatsSettings = Field(default_factory=StatsSettings)
    kafka: KafkaConnection = Field(default_factory=KafkaConnection)
    postgres: PostgresConnection = Field(default_factory=PostgresConnection)

    @property
    def app_id(self) -> str:
        namespace = self.kafka.topic_namespace
        return f"{namespace}.{self.stats.app_name}" if namespace else self.stats.app_name
