"""Connection settings shared by every service, read from the environment."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseSettings):
    """Where Kafka is; `SLOTFLOW_KAFKA_BOOTSTRAP` (the devstack prints it)."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_KAFKA_", extra="ignore")

    bootstrap: str = "127.0.0.1:19092"
    client_id_prefix: str = "slotflow"
    #: Records above this size are refused by producers and dead-lettered by consumers.
    max_message_bytes: int = Field(default=1_048_576, ge=1024)


class PostgresSettings(BaseSettings):
    """Where PostgreSQL is; `SLOTFLOW_PG_DSN` (the devstack prints it)."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_PG_", extra="ignore")

    dsn: str = "postgresql://slotflow@127.0.0.1:15432/slotflow"
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
