"""Where Kafka and PostgreSQL are, and how to connect to them: the settings every service reads.

The library's `slotflow.settings` builds on these (its `KafkaSettings` adds what only the
library's clients use) and re-exports `PostgresSettings`; the stats worker reads them here. So the
variables, their checks and the masking of the secrets they carry are defined once.
"""

import logging
import os
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow_base.kafka.security import KafkaSecurity
from slotflow_base.logs import redact, register_dsn, register_secret

log = logging.getLogger(__name__)


def env_names(variable: str, *former: str) -> AliasChoices:
    """The variable a service setting is read from, then the names it had before, still read (a
    deployment that sets one keeps working) with a deprecation warning (`ServiceSettings`)."""
    return AliasChoices(variable, *former)


class ServiceSettings(BaseSettings):
    """What every service's own settings share, named the same in each: its pool, its metrics
    endpoint and its event loop. A service's settings build on this with their own prefix
    (`SLOTFLOW_<SERVICE>_`) and may change a default; consumer groups are named through
    `KafkaConnection.consumer_group`.

    A setting renamed keeps its former variable as a later choice of its alias (`env_names`):
    read when the new one is not set, and logged as deprecated.
    """

    # populate_by_name: a renamed field (read from the environment by its alias) is still set by
    # its own name in code.
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    #: Connections in the service's PostgreSQL pool, shared by all its loops (and relays).
    pool_size: int = Field(default=10, ge=2, le=200)
    #: Port of the Prometheus endpoint (on `metrics_host`); 0 (the default) turns it off. Each
    #: deployment chooses the ports (deploy/kubernetes/config.yaml: 9310 ticker, 9320 claimer,
    #: 9330 orchestrator, 9340 dlq): a default port collides when two services share a host.
    metrics_port: int = Field(default=0, ge=0, le=65535)
    #: The metrics endpoint's address: loopback unless exposed on purpose (it has no authentication).
    metrics_host: str = "127.0.0.1"
    #: The event loop the process entry runs on (`slotflow.service.serve`): uvloop (libuv) spends
    #: less CPU per callback and per socket read than asyncio's own; "asyncio" turns it off.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"

    def model_post_init(self, context: Any, /) -> None:
        warn_former_names(self)


def warn_former_names(settings: BaseSettings) -> None:
    """Log a deprecation warning for each setting read from its former variable."""
    environment = {name.upper() for name in os.environ}
    for name, field in type(settings).model_fields.items():
        alias = field.validation_alias
        if not isinstance(alias, AliasChoices) or len(alias.choices) < 2:
            continue
        current, *former = (str(choice).upper() for choice in alias.choices)
        if current in environment:
            continue
        for old in former:
            if old in environment:
                log.warning(
                    "%s is deprecated: set %s instead (setting %s; the old name is still read for now)",
                    old,
                    current,
                    name,
                )


class KafkaConnection(BaseSettings):
    """Where Kafka is (`SLOTFLOW_KAFKA_BOOTSTRAP`, the devstack prints it), the deployment's topic
    namespace, and the TLS and SASL settings every client connects with."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_KAFKA_", extra="ignore")

    #: The brokers to start from, `host:port[,host:port...]`.
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

    #: libpq connection URI; TLS in its query (`?sslmode=verify-full&sslrootcert=/ca.crt`).
    dsn: str = "postgresql://slotflow@127.0.0.1:15432/slotflow"
    #: `SLOTFLOW_PG_PASSWORD`; given, it takes precedence over a password in the DSN.
    password: SecretStr | None = None
    #: Connections a pool keeps open when idle.
    pool_min_size: int = Field(default=1, ge=0)
    #: Connections a pool opens at most (a service's own pool setting, where it has one, wins).
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
