"""What request handlers share while the app runs (`app.state.services`), and its dependency."""

from dataclasses import dataclass

from fastapi import Request

from slotflow.errors import SlotflowError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.principals import Signer
from slotflow.relay import OutboxRelay
from slotflow_api.auth import Authenticator
from slotflow_api.config import Settings
from slotflow_api.metrics import Metrics
from slotflow_api.projector import Projector
from slotflow_api.workflow_queries import Queries


@dataclass
class Services:
    settings: Settings
    pool: Pool
    producer: Producer
    metrics: Metrics
    auth: Authenticator
    projector: Projector | None = None
    #: Signs every command the api publishes, naming the caller (the api's own key).
    signer: Signer | None = None
    #: Publishes the api's outbox: the signing keys' records for the keys topic.
    relay: OutboxRelay | None = None
    #: Asks the orchestrators the queries of their workflows (`workflow_queries`).
    queries: Queries | None = None
    #: Why a loop of this process (projector, purge, relay) crashed, once one has: readiness is off
    #: from then on, since the read model is frozen (docs/api.md, "Health").
    crashed: str | None = None

    @property
    def schema(self) -> str:
        return self.settings.api.db_schema


class NotStarted(SlotflowError):
    """The app's lifespan has not run: start it with uvicorn or an ASGI lifespan manager."""


def services(request: Request) -> Services:
    found = getattr(request.app.state, "services", None)
    if not isinstance(found, Services):
        raise NotStarted()
    return found
