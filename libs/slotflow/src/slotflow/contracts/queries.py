"""What the api asks an orchestrator's query listener (docs/decisions/0010): not a Kafka record,
one HTTP request, but a model like every message, so the sender and the listener read one shape."""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from slotflow.contracts.acceptance import INT4_MAX
from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.contracts.workflows import WorkflowId


class QueryRequest(BaseModel):
    """Answer the query ``query`` (with ``arg``) of ``workflow_id``, if the listener's orchestrator
    holds ``shard`` under ``lease_token`` (what `query_route` said when the api asked)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workflow_id: WorkflowId
    query: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    #: The handler's one argument (any JSON), or None when it takes none.
    arg: Any = None
    shard: int = Field(ge=0, le=INT4_MAX)
    lease_token: int = Field(ge=1)
