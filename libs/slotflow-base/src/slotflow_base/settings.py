"""Where Kafka and PostgreSQL are, and how to connect to them: the settings every service reads.

The library's `slotflow.settings` builds on these (its `KafkaSettings` adds what only the
library's clients use) and re-exports `PostgresSettings`; the stats worker reads them here. So the
variables, their checks and the masking of the secrets they carry are defined once.
"""

from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow_base.kafka.security import KafkaSecurity
from slotflow_base.logs import redact, register_dsn, register_secret


class KafkaConnection(BaseSettings):
    """Where Kafka is (`SLOTFLOW_KAFKA_BOOTSTRAP`, the devstack prints it), the deployment's topic
    namespace, and the TLS and SASL settings every client connects with."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_KAFKA_", extra="ignore")

    bootstrap: str = "127.0.0.1:19092"
    #: Prefix for every topic name, so several deployments (or test runs) share one cluster.
    topic_namespace: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,100}$")
    #: TLS and SASL (SLOTFLOW_KAFKA_SECURITY_PROTOCOL, SLOTFLOW_KAFKA_SASL_*, SLOTFLOW_KAFKA_SSL_*;
    #: slotflow_base.kafka.security), read from the environment on its own.
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)

    def client_options(self) -> dict[str, Any]:
        """Bootstrap and security keyword arguments for any aiokafka client."""
        return {"bootstrap_servers": self.bootstrap, **self.security.client_options()}

    def topic_name(self, name: str) -> str:
        """The name topic ``name`` has in this deployment (its namespace in front)."""
        return f"{self.topic_namespace}.{name}" if self.topic_namespace else name

    def consumer_group(self, name: str) -> str:
        """The name consumer group ``name`` has in this deployment: inside its namespace like its
        topics, so deployments sharing a cluster never join each other's groups. Every service
        names its groups through here."""
        return f"{self.topic_namespace}.{name}" if self.topic_namespace else name


class PostgresSettings(BaseSettings):
    """Where PostgreSQL is; `SLOTFLOW_PG_DSN` (the devstack prints it).

    TLS is set in the DSN's query, as libpq spells it: `?sslmode=verify-full&sslrootcert=/ca.crt`
    (asyncpg reads sslmode, sslrootcert, sslcert, sslkey and sslcrl from there). The password
    may sit in the DSN or, better, in `SLOTFLOW_PG_PASSWORD` (a secret: never shown); either way
    it is registered with `slotflow_base.logs` when the settings are built, so no log line shows it.
    """

    # A refused value is not quoted back: the DSN and the password are among the input.
    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_PG_", extra="ignore", hide_input_in_errors=True)

    dsn: str = "postgresql://slotflow@127.0.0.1:15432/slotflow"
    #: `SLOTFLOW_PG_PASSWORD`; given, it takes precedence over a password in the DSN.
    password: SecretStr | None = None
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
    #: How long a service starting up waits for PostgreSQL (still starting, or restarting) before
    #: it gives up; 0 fails at once. `SLOTFLOW_PG_STARTUP_WAIT_SECONDS`.
    startup_wait_seconds: float = Field(default=300.0, ge=0)

    def model_post_init(self, context: Any, /) -> None:
        register_dsn(self.dsn)
        register_secret(self.password)

    def __repr_args__(self) -> Any:
        # A settings object printed (a debugger, an error report) shows the DSN without its password.
        for name, value in super().__repr_args__():
            yield name, redact(value) if name == "dsn" and isinstance(value, str) else value

    @property
    def display_dsn(self) -> str:
        """The DSN for messages: its password masked."""
        return redact(self.dsn)

    def connect_kwargs(self) -> dict[str, Any]:
        """What asyncpg takes besides the DSN: the password from `SLOTFLOW_PG_PASSWORD`, if set."""
        return {"password": self.password.get_secret_value()} if self.password is not None else {}
