"""Connection settings shared by every service, read from the environment.

Where Kafka and PostgreSQL are and how to connect (`KafkaConnection`, `KafkaSecurity`,
`PostgresSettings`) is defined in `slotflow_base.settings`, shared with the stats worker, which
cannot import this library (decision 0005); `KafkaSettings` adds what only the library's own
clients use, and `WorkerSettings` what only the worker services (not the api) read.
"""

from pydantic import Field

from slotflow.contracts.topics import TOPICS, TopicSpec
from slotflow_base.settings import KafkaConnection
from slotflow_base.settings import PostgresSettings as PostgresSettings
from slotflow_base.settings import ServiceSettings as ServiceSettings
from slotflow_base.settings import env_names as env_names


class WorkerSettings(ServiceSettings):
    """What the worker services (ticker, claimer, orchestrator, dlq) add to every service's base:
    their probes, served with their metrics (`slotflow.health`; the api's are routes of its app)."""

    #: How long the event loop may go without its heartbeat (stamped every 0.5 s) before `/livez`
    #: on the metrics port answers 503, so a liveness probe has the process restarted: longer than
    #: a garbage collection or the biggest batch a loop takes in one step, shorter than a hung
    #: loop should hold its leases and partitions (docs/operations.md, "Probes").
    liveness_stall_seconds: float = Field(default=30.0, gt=0, le=3600)


class KafkaSettings(KafkaConnection):
    """Where Kafka is; `SLOTFLOW_KAFKA_BOOTSTRAP` (the devstack prints it), the topic namespace, the
    TLS and SASL settings (`KafkaConnection`), and the library's producer and topic settings."""

    #: The start of every Kafka client id (the broker's logs and quotas see it).
    client_id_prefix: str = "slotflow"
    #: Records above this size are refused by producers and dead-lettered by consumers.
    max_message_bytes: int = Field(default=1_048_576, ge=1024)
    #: Replicas per partition when slotflow creates its topics; None: min(3, the cluster's brokers).
    replication_factor: int | None = Field(default=None, ge=1)
    #: The topics' `min.insync.replicas`; None: replication factor - 1 when that is above 1.
    min_insync_replicas: int | None = Field(default=None, ge=1)
    #: How long a client starting up waits for a broker to answer (restarting, or the network to it
    #: down for a moment) before it gives up; 0 fails at once. A refused login or ACL never waits.
    startup_wait_seconds: float = Field(default=300.0, ge=0)

    def topic(self, spec: TopicSpec) -> str:
        """The topic name to use for ``spec`` in this deployment."""
        return self.topic_name(spec.name)

    def topics(self) -> list[TopicSpec]:
        """Every topic of the table, renamed into this deployment's namespace."""
        return [spec.model_copy(update={"name": self.topic(spec)}) for spec in TOPICS]
