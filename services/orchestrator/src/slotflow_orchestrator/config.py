"""Settings of the orchestrator (env prefix SLOTFLOW_ORCHESTRATOR_); no I/O at import."""

import os
import socket
import uuid
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow.logs import register_secret
from slotflow.principals import SignatureSettings
from slotflow.settings import KafkaSettings, PostgresSettings, WorkerSettings, env_names

#: Interfaces a query listener may bind without a token: only this host reaches them.
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
#: Interfaces that mean "every one": not an address anyone can reach.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - recognised, not bound


def _default_instance() -> str:
    # Unique per process: the lease owner name; two orchestrators on one host must differ.
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class OrchestratorSettings(WorkerSettings):
    """How one orchestrator process consumes, decides and publishes."""

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_ORCHESTRATOR_", extra="ignore")

    #: Names this replica in envelopes, shard leases and client ids; unique per process.
    instance_id: str = Field(default_factory=_default_instance, min_length=1, max_length=200)
    #: The PostgreSQL schema that holds workflows, payloads, outbox and inbox.
    db_schema: str = Field(default="orchestrator", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: Consumer group over the command, run-event and timer-event topics (prefixed by the topic
    #: namespace when one is set). The command topic's partitions it assigns are the shards owned.
    group_id: str = "slotflow-orchestrator"
    #: Comma-separated module paths imported at start-up; the workflows they define are served.
    workflow_modules: str = ""
    #: Workflows decided at once (each its own transaction).
    decide_concurrency: int = Field(default=8, ge=1, le=256)
    #: Decisions of one shard that share a transaction (one lease check, one commit); each stays
    #: whole, and a group that fails is decided again one workflow at a time. A group costs a
    #: fixed number of statements, so larger groups under load cost less CPU per workflow, in
    #: the orchestrator and in PostgreSQL (docs/benchmarks/orchestrator.md: 16 to 128).
    decisions_per_transaction: int = Field(default=128, ge=1, le=1000)
    #: Most workflows picked per pass over the pending inputs (each held shard up to its even share).
    decide_batch: int = Field(default=400, ge=1, le=10_000)
    #: How often an idle decider looks for inputs another orchestrator wrote for its shards.
    idle_poll_seconds: float = Field(default=0.05, gt=0, le=10)
    #: How often the owned shards are compared with the group's assignment.
    lease_check_seconds: float = Field(default=0.5, gt=0, le=60)
    #: History payload fields (inputs, results, signal payloads) larger than this, as compact JSON,
    #: are stored once in the payload table and travel by reference (`slotflow.workflow.payloads`).
    payload_threshold_bytes: int = Field(default=64 * 1024, ge=1024)
    #: The claimers' schema, in the same database: an activity result too large for RunCompleted
    #: is stored in its payload table and RunCompleted carries a reference the orchestrator reads.
    activity_payloads_schema: str = Field(default="claimer", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: History events a run may reach before the runtime refuses to step it further.
    max_history_events: int = Field(default=50_000, ge=10)
    #: How long one poll of the orchestrator's topics waits for records.
    poll_timeout_ms: int = Field(default=200, ge=1)
    #: How long the group waits for a silent (crashed, paused) orchestrator before its partitions,
    #: and so its workflows, move to another one. The broker refuses less than its
    #: group.min.session.timeout.ms (6 s by default).
    session_timeout_ms: int = Field(default=10_000, ge=1000, le=300_000)
    #: Records decided per transaction at most.
    max_poll_records: int = Field(default=500, ge=1, le=10_000)
    #: How long consumed record ids are kept to recognise redeliveries: longer than the commands
    #: topic keeps records (7 days), so a redelivered command is never answered twice.
    inbox_retention_hours: float = Field(default=8 * 24, ge=1)
    #: How often old inbox ids are pruned.
    prune_interval_seconds: float = Field(default=600.0, gt=0)
    #: Closed workflows' history rows go this long after they closed (0 keeps them); the row
    #: stays, and the history topic keeps every event forever (docs/orchestrator.md, "Retention").
    history_retention_days: float = Field(default=30.0, ge=0)
    #: How often closed workflows past their retention and old inbox ids are purged.
    purge_interval_seconds: float = Field(default=300.0, gt=0)
    #: Rows deleted per purge statement (short transactions).
    purge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    #: Connections in the orchestrator's pool (decisions, intake, relay); formerly POOL_MAX_SIZE.
    pool_size: int = Field(
        default=12,
        ge=2,
        le=200,
        validation_alias=env_names("SLOTFLOW_ORCHESTRATOR_POOL_SIZE", "SLOTFLOW_ORCHESTRATOR_POOL_MAX_SIZE"),
    )
    #: Port of the query listener, which answers the api's queries of this orchestrator's
    #: workflows (docs/workflows.md, "Queries"); 0 (the default) serves none, and a query of a
    #: workflow on this orchestrator's shards is answered 503.
    query_port: int = Field(default=0, ge=0, le=65535)
    #: The interface the query listener binds.
    query_host: str = "127.0.0.1"
    #: The address the api reaches the listener at (`http://10.0.3.7:9341`); unset: the bound
    #: host, or for `0.0.0.0` the address this host's name resolves to (a container's or pod's IP).
    query_address: str | None = None
    #: The bearer token the api must present to the listener (SLOTFLOW_API_ORCHESTRATOR_QUERY_TOKEN
    #: on the api); required once the listener binds anything but the loopback interface.
    query_token: SecretStr | None = None
    #: Testing only: hold every decision transaction open this long before it commits, widening
    #: the window a SIGKILL must land in (chaos tests).
    crash_window_seconds: float = Field(default=0.0, ge=0, le=60)

    @field_validator("query_token", "query_address", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _query_token_off_loopback(self) -> "OrchestratorSettings":
        if self.query_port and self.query_token is None and self.query_host not in LOOPBACK:
            raise ValueError(
                f"SLOTFLOW_ORCHESTRATOR_QUERY_HOST={self.query_host} answers queries beyond this host: set "
                "SLOTFLOW_ORCHESTRATOR_QUERY_TOKEN (and the api's SLOTFLOW_API_ORCHESTRATOR_QUERY_TOKEN)"
            )
        return self

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        register_secret(self.query_token)

    def query_url(self) -> str:
        """Where the api reaches this orchestrator's query listener: `query_address`, else the
        bound host, else (bound to every interface) the address this host's name resolves to (a
        container's or a pod's own IP)."""
        if self.query_address:
            return self.query_address
        host = self.query_host
        if host in WILDCARDS:
            host = socket.gethostbyname(socket.gethostname())
        return f"http://{f'[{host}]' if ':' in host else host}:{self.query_port}"

    def modules(self) -> list[str]:
        return [m.strip() for m in self.workflow_modules.split(",") if m.strip()]


class Settings(BaseSettings):
    """Everything the service reads from the environment."""

    orchestrator: OrchestratorSettings = Field(default_factory=OrchestratorSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)
    #: Whether workflow commands must be signed, and the key the orchestrator signs its own with.
    signatures: SignatureSettings = Field(default_factory=SignatureSettings)

    def group_id(self) -> str:
        return self.kafka.consumer_group(self.orchestrator.group_id)
