"""A typed Python client for slotflow: schedules, workflows and reads, over Kafka or the api.

Two transports issue commands, both returning the command id and offering a read-your-writes
wait: `HttpTransport` (through the api, with a bearer token; reads too) and `KafkaTransport`
(straight to the command topics; its wait reads the acknowledgement events; reads need the api).
A started workflow is a `WorkflowHandle`: `await handle.result()` waits for its end.
See docs/client.md.

Example::

    from slotflow.client import Client, HttpTransport

    async with Client(HttpTransport("http://127.0.0.1:8080", token=token)) as client:
        await client.trigger_schedule("nightly-payouts", wait=10)
        handle = await client.start_workflow(Checkout.run, order, id="order-1042")
        receipt = await handle.result()
"""

from slotflow.client._client import Client, CommandTransport
from slotflow.client._handles import WorkflowHandle
from slotflow.client._http import HttpTransport
from slotflow.client._kafka import KafkaTransport
from slotflow.client._sync import SyncClient, SyncWorkflowHandle
from slotflow.client.errors import (
    ApiError,
    BrokerUnreachable,
    ClientClosed,
    ClientError,
    CommandRejected,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotAuthorized,
    NotFound,
    ReadsNeedHttp,
    Unavailable,
    WaitTimedOut,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowOutcomeError,
    WorkflowQueryFailedError,
    WorkflowRejectedError,
    WorkflowResultError,
    WorkflowResultTimeoutError,
    WorkflowTerminatedError,
)
from slotflow.client.models import (
    BulkWorkflow,
    BulkWorkflowsResult,
    CommandStatus,
    DeadLetter,
    DeadLetterPreview,
    Page,
    RepairResult,
    RepairSlot,
    Run,
    Schedule,
    Sent,
    Workflow,
)

__all__ = [
    "ApiError",
    "BrokerUnreachable",
    "BulkWorkflow",
    "BulkWorkflowsResult",
    "Client",
    "ClientClosed",
    "ClientError",
    "CommandRejected",
    "CommandStatus",
    "CommandTransport",
    "Conflict",
    "DeadLetter",
    "DeadLetterPreview",
    "Forbidden",
    "HttpTransport",
    "InvalidRequest",
    "KafkaTransport",
    "NotAuthorized",
    "NotFound",
    "Page",
    "ReadsNeedHttp",
    "RepairResult",
    "RepairSlot",
    "Run",
    "Schedule",
    "Sent",
    "SyncClient",
    "SyncWorkflowHandle",
    "Unavailable",
    "WaitTimedOut",
    "Workflow",
    "WorkflowCancelledError",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowOutcomeError",
    "WorkflowQueryFailedError",
    "WorkflowRejectedError",
    "WorkflowResultError",
    "WorkflowResultTimeoutError",
    "WorkflowTerminatedError",
]
