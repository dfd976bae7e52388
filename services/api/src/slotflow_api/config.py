"""Settings of the api service (env prefix SLOTFLOW_API_); no I/O at import."""

from datetime import timedelta
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from slotflow.settings import KafkaSettings, PostgresSettings


class ApiSettings(BaseSettings):
    """What the projector and the HTTP service need besides Kafka and PostgreSQL."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_API_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: The PostgreSQL schema that holds the read model.
    db_schema: str = Field(default="api", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Base of the projector's consumer group; a rebuild appends a fresh suffix.
    group_base: str = "slotflow-api-projector"
    #: Run the projector inside the HTTP process (one process serves and projects).
    embedded_projector: bool = True
    projector_max_records: int = Field(default=1000, ge=1, le=100_000)
    projector_poll_ms: int = Field(default=200, ge=1)
    #: A JobDue produced later than this after its slot (or jittered fire time) counts as late.
    late_threshold: timedelta = Field(default=timedelta(seconds=5), ge=timedelta(0))
    #: Most slots one audit request may expand; wider ranges are refused with a 422.
    audit_max_slots: int = Field(default=20_000, ge=1)
    #: Longest a request may wait for a command to be reflected (read-your-writes).
    max_wait_seconds: float = Field(default=30.0, gt=0)
    readiness_timeout_seconds: float = Field(default=2.0, gt=0)
    #: Days an ended job run (and a skipped slot) is kept in the read model; 0 keeps everything.
    #: The audit judges no slot older than what was purged (docs/api.md, "Retention").
    retention_days: float = Field(default=30.0, ge=0)
    purge_interval_seconds: float = Field(default=300.0, gt=0)
    purge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    #: Largest request body accepted; larger ones get 413 before they are read.
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    #: Largest schedule payload (as compact JSON): every run of the schedule carries it.
    max_payload_bytes: int = Field(default=65_536, ge=2)
    #: Backfills of one schedule in flight at once (not answered by the ticker yet, or a run of
    #: their range not finished): each emits up to SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS runs at once,
    #: so one more is refused with 409 until one of them has finished.
    max_backfills_in_flight: int = Field(default=2, ge=1, le=1000)
    #: Host names this API answers to (comma-separated in the environment); empty: any. Set it
    #: wherever the API is reachable by a name, against DNS rebinding (docs/api.md, "CSRF").
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Origins besides the API's own whose pages may send state-changing requests.
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class Settings(BaseSettings):
    """Everything the service reads from the environment."""

    api: ApiSettings = Field(default_factory=ApiSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)

    def group_id(self, suffix: str) -> str:
        """The projector group for this deployment's namespace and read-model generation."""
        namespace = self.kafka.topic_namespace
        base = f"{namespace}.{self.api.group_base}" if namespace else self.api.group_base
        return f"{base}.{suffix}"
