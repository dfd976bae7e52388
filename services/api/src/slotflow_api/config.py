"""Settings of the api service (env prefix SLOTFLOW_API_); no I/O at import."""

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from slotflow.logs import register_dsn, register_secret
from slotflow.settings import KafkaSettings, PostgresSettings, ServiceSettings, env_names

#: The bootstrap token is a standing admin secret: at least this long (about 190 bits in base64).
MIN_BOOTSTRAP_TOKEN_CHARS = 32
#: Which values of the OIDC scope claim grant which slotflow scope, unless configured.
DEFAULT_OIDC_SCOPE_MAP: dict[str, Literal["read", "operate", "admin"]] = {
    "slotflow:read": "read",
    "slotflow:operate": "operate",
    "slotflow:admin": "admin",
}


class ApiSettings(ServiceSettings):
    """What the projector and the HTTP service need besides Kafka and PostgreSQL."""

    # A refused value is never quoted back: a too-short bootstrap token would print in clear.
    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_API_", extra="ignore", hide_input_in_errors=True)

    #: The interface the HTTP server listens on; loopback unless exposed on purpose.
    host: str = "127.0.0.1"
    #: Connections in the api's pool (requests, the projector, the relay); formerly read from
    #: SLOTFLOW_PG_POOL_MAX_SIZE, which the api still reads (deprecated) when this is unset.
    pool_size: int = Field(
        default=10,
        ge=2,
        le=200,
        validation_alias=env_names("SLOTFLOW_API_POOL_SIZE", "SLOTFLOW_PG_POOL_MAX_SIZE"),
    )
    #: The HTTP server's port.
    port: int = Field(default=8080, ge=0, le=65535)
    #: The PostgreSQL schema that holds the read model.
    db_schema: str = Field(default="api", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Base of the projector's consumer group; a rebuild appends a fresh suffix.
    group_base: str = "slotflow-api-projector"
    #: Run the projector inside the HTTP process (one process serves and projects).
    embedded_projector: bool = True
    #: Events the projector applies per transaction at most.
    projector_max_records: int = Field(default=1000, ge=1, le=100_000)
    #: How long one poll of the projected topics waits for records.
    projector_poll_ms: int = Field(default=200, ge=1)
    #: A JobDue produced later than this after its slot (or jittered fire time) counts as late.
    late_threshold: timedelta = Field(default=timedelta(seconds=5), ge=timedelta(0))
    #: Most slots one audit request may expand; wider ranges are refused with a 422.
    audit_max_slots: int = Field(default=20_000, ge=1)
    #: Longest a request may wait for a command to be reflected (read-your-writes); `?wait=` is
    #: refused past 300 s (routes.common.MAX_WAIT_SECONDS), and held at most this long.
    max_wait_seconds: float = Field(default=300.0, gt=0, le=300)
    #: The orchestrators' PostgreSQL schema: the api asks its `query_route` function which
    #: orchestrator answers a workflow's queries (EXECUTE only, `slotflow db bootstrap-roles`).
    orchestrator_schema: str = Field(default="orchestrator", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: The bearer token of the orchestrators' query listeners (their SLOTFLOW_ORCHESTRATOR_QUERY_TOKEN).
    orchestrator_query_token: SecretStr | None = None
    #: Longest a query may take, moves of its workflow's shard to another orchestrator included;
    #: a caller's `timeout_seconds` may ask for less.
    query_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    #: How long /readyz waits for Kafka and PostgreSQL before it answers not ready.
    readiness_timeout_seconds: float = Field(default=2.0, gt=0)
    #: After a loop of the process (the projector, the purge, the relay) crashed: off (the
    #: default), the process exits non-zero so whatever supervises it restarts it; on, it keeps
    #: serving reads from a read model no longer updated. /readyz answers 503 either way.
    keep_serving_after_crash: bool = False
    #: Days an ended job run (and a skipped slot) is kept in the read model; 0 keeps everything.
    #: The audit judges no slot older than what was purged (docs/api.md, "Retention").
    retention_days: float = Field(default=30.0, ge=0)
    #: How often read-model rows past their retention are purged.
    purge_interval_seconds: float = Field(default=300.0, gt=0)
    #: Rows deleted per purge statement (short transactions).
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

    #: Origins whose pages may call this API from a browser (CORS, comma-separated). Empty (the
    #: default): no CORS headers at all, so no other origin can read an answer. Listed origins
    #: may also send state-changing requests (they join `allowed_origins`).
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # -- authentication (docs/security.md, "API authentication and authorisation") --
    #: `on`: every endpoint but /healthz, /readyz and /metrics needs a bearer token with the
    #: route's scope. `off` lets anyone do anything; only ever set explicitly, and logged as a
    #: warning at start-up.
    auth: Literal["on", "off"] = "on"
    #: An admin token that lives only in this environment (principal `bootstrap`), to create the
    #: first tokens with `slotflow token create`; unset it once they exist. At least 32 characters.
    bootstrap_token: SecretStr | None = None
    #: OIDC: the JWKS whose keys sign the JWTs this API accepts; unset, JWTs are refused.
    oidc_jwks_url: str | None = None
    #: The `iss` a JWT must carry (required with a JWKS).
    oidc_issuer: str | None = None
    #: The `aud` a JWT must carry (required with a JWKS).
    oidc_audience: str | None = None
    #: The JWT signature algorithms accepted, comma-separated.
    oidc_algorithms: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["RS256"])
    #: The claim that names the caller (recorded as `oidc:<value>` on its commands).
    oidc_principal_claim: str = "sub"
    #: The claim holding the caller's grants (a space-separated string or a list) ...
    oidc_scope_claim: str = "scope"
    #: ... and which of its values grant which slotflow scope (JSON object); the highest wins.
    oidc_scope_map: dict[str, Literal["read", "operate", "admin"]] = Field(
        default_factory=DEFAULT_OIDC_SCOPE_MAP.copy
    )
    #: How long the fetched JWKS is trusted before it is fetched again.
    oidc_jwks_cache_seconds: float = Field(default=300.0, gt=0)
    #: How long a JWKS fetch may take.
    oidc_jwks_timeout_seconds: float = Field(default=5.0, gt=0)
    #: The PEM file of the api's own Ed25519 key, with which it signs every command it publishes
    #: for the callers it authenticated (registered at start as `service:api`). Unset: a key made
    #: at start and held in memory only, registered the same way (docs/security.md).
    signing_key_file: Path | None = None

    @field_validator("allowed_hosts", "allowed_origins", "cors_origins", "oidc_algorithms", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("bootstrap_token", "oidc_jwks_url", "orchestrator_query_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # `SLOTFLOW_API_BOOTSTRAP_TOKEN=` (compose passes an unset variable as empty) means none.
        return None if value == "" else value

    @field_validator("bootstrap_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_BOOTSTRAP_TOKEN_CHARS:
            raise ValueError(
                f"SLOTFLOW_API_BOOTSTRAP_TOKEN must be at least {MIN_BOOTSTRAP_TOKEN_CHARS} characters "
                "(e.g. `python -c 'import secrets; print(\"sft_\" + secrets.token_urlsafe(32))'`)"
            )
        return value

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        # The bootstrap token (and a password in the JWKS URL) are masked in every log line.
        register_secret(self.bootstrap_token)
        register_secret(self.orchestrator_query_token)
        if self.oidc_jwks_url:
            register_dsn(self.oidc_jwks_url)

    @model_validator(mode="after")
    def _oidc_complete(self) -> Self:
        if self.oidc_jwks_url and not (self.oidc_issuer and self.oidc_audience):
            raise ValueError(
                "SLOTFLOW_API_OIDC_JWKS_URL needs SLOTFLOW_API_OIDC_ISSUER and SLOTFLOW_API_OIDC_AUDIENCE: "
                "a JWT for another issuer or service must not pass"
            )
        return self


class Settings(BaseSettings):
    """Everything the service reads from the environment."""

    api: ApiSettings = Field(default_factory=ApiSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)

    def group_id(self, suffix: str) -> str:
        """The projector group for this deployment's namespace and read-model generation."""
        return self.kafka.consumer_group(f"{self.api.group_base}.{suffix}")
