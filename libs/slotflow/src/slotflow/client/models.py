"""The typed results of `slotflow.client`.

Read results are pydantic models of the api's JSON with the fields most callers branch on typed;
every other field the api sends is kept (``model_extra``), so a newer api's additions are not lost
and `model_dump()` gives the whole body back.
"""

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from slotflow.contracts.search import SearchAttribute, search_attribute

#: What a command's status can be; `accepted`, `rejected` and `published` are final.
Status = Literal["unknown", "pending", "published", "accepted", "rejected"]
#: Statuses after which waiting longer cannot change the answer.
FINAL_STATUSES: frozenset[str] = frozenset({"accepted", "rejected", "published"})


class _Body(BaseModel):
    """A read model's body: typed where declared, everything else kept as sent."""

    model_config = ConfigDict(extra="allow", frozen=True)


class CommandStatus(_Body):
    """Where a command stands.

    `accepted`: its consumer applied it (read-your-writes: the change is visible in the api's
    read model); `rejected`: refused, `reason` says why; `published`: seen on its topic, and its
    consumer does not acknowledge commands; `pending`/`unknown`: not final yet.
    """

    command_id: str
    status: Status
    reason: str | None = None
    command_type: str | None = None
    subject: str | None = None
    principal: str | None = None
    #: What its consumer said it did, for a DLQ command ("redrove 3 dead letter(s); ...").
    summary: str | None = None

    @property
    def final(self) -> bool:
        """Whether waiting longer cannot change the status."""
        return self.status in FINAL_STATUSES


class Sent(BaseModel):
    """A command on its way: its id (the envelope id; pass it to `Client.wait`), and its outcome if waited for."""

    model_config = ConfigDict(frozen=True)

    command_id: str
    command_type: str
    #: The command topic it was published to (namespaced), or None when sent through the api.
    topic: str | None = None
    #: The record key (schedule id, workflow id, ...), or None when sent through the api.
    key: str | None = None
    #: The final status when the call waited (`wait=`), else None.
    outcome: CommandStatus | None = None


class Schedule(_Body):
    """One schedule as the api shows it (`GET /v1/schedules/{id}`), with `spec`, `next_slots`, ..."""

    schedule_id: str
    handler: str | None = None
    #: `active`, `paused`, `finished` (nothing left to fire) or `deleted`.
    status: str | None = None
    paused: bool = False


class Run(_Body):
    """One run (`GET /v1/runs/{id}`): `state`, `timings`, `attempts`, `result`, `error`, ..."""

    run_id: str
    job_id: str | None = None
    state: str
    slot: datetime | None = None
    kind: str | None = None
    result: Any = None


class Workflow(_Body):
    """One workflow (`GET /v1/workflows/{id}`): `status`, `steps`, `result`, `error`, ..."""

    workflow_id: str
    workflow_type: str | None = None
    status: str
    result: Any = None
    #: What an open workflow waits on that needs a person ("activity parked: shipping.book #2
    #: (attempts_exhausted)"); the detail view's `actions` say what can be done (retry_activity).
    waiting: str | None = None
    #: The command id of the StartWorkflow that began the run shown (a continued run keeps its
    #: start's): the newest run of the id, or the one `get_workflow(start_command_id=...)` asked for.
    start_command_id: str | None = None
    #: How many runs StartWorkflows began under this id (a reuse after close adds one).
    runs: int | None = None
    #: The start's memo (any JSON object).
    memo: dict[str, Any] = Field(default_factory=dict)
    #: The search attributes as plain values (a datetime for `datetime`): the start's, then its
    #: upserts'. The api sends them typed; `typed_search_attributes` keeps that form.
    search_attributes: dict[str, Any] = Field(default_factory=dict)
    #: The same, as the api sends them: `{"Stage": SearchAttribute(type="keyword", value="paid")}`.
    typed_search_attributes: dict[str, SearchAttribute] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _plain_attributes(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("search_attributes"), dict):
            typed = {name: search_attribute(value) for name, value in data["search_attributes"].items()}
            data = {
                **data,
                "typed_search_attributes": typed,
                "search_attributes": {name: attribute.value for name, attribute in typed.items()},
            }
        return data


class DeadLetter(_Body):
    """One dead letter (`GET /v1/dlq/{id}`): `reason`, `error`, `topic`, ...

    `status`: `parked`, `redriving` (its owner was asked, no answer yet, since `status_at`),
    `redriven`, `redrive_failed` (`note` says why) or `discarded`.
    """

    dead_letter_id: str
    status: str
    reason: str
    note: str = ""
    status_at: datetime | None = None
    workflow_id: str | None = None
    sequence: int | None = None
    redrive_target: str | None = None


class RepairSlot(_Body):
    """A slot a re-run or a mark touches (`action`), or leaves out (`reason`)."""

    slot: datetime
    run_id: str | None = None
    #: The run's state, or what the audit found (`missed`, `skipped_by_policy`).
    state: str
    action: str | None = None
    reason: str | None = None


class RepairResult(_Body):
    """What a re-run or a mark touches (a dry run: would touch; nothing was published), and what
    it leaves out and why; `command_id` is the published command's."""

    dry_run: bool
    count: int
    slots: list[RepairSlot]
    left_out_count: int
    left_out: list[RepairSlot]
    pending: int = 0
    command_id: str | None = None
    status: str | None = None
    reason: str | None = None


class BulkWorkflow(_Body):
    """A workflow a bulk cancel or terminate takes, with its command once published."""

    workflow_id: str
    workflow_type: str | None = None
    status: str | None = None
    command_id: str | None = None
    #: Left out: why.
    reason: str | None = None


class BulkWorkflowsResult(_Body):
    """What a bulk cancel or terminate takes (a dry run: would take; nothing was published): the
    `count` of workflows and the first of them (every one, each with its command, once published),
    `more` open ones beyond the limit, what it leaves out by reason, and how many of the selection
    are compensating already (a cancel leaves them out, a terminate ends their compensations)."""

    action: str
    dry_run: bool
    count: int
    workflows: list[BulkWorkflow]
    more: int = 0
    left_out_count: int = 0
    left_out: dict[str, int] = {}
    left_out_workflows: list[BulkWorkflow] = []
    compensating: int = 0


class DeadLetterPreview(_Body):
    """What a redrive or discard would touch (`?dry_run=true`): nothing was published.

    `would_touch` letters (at most the command's limit), the first of them in `items` (with the
    `owner` a redrive would ask, or its `refusal`), the `owners` asked and how many letters each,
    the letters no owner can take (`refused`), and the workflows' letters a bulk redrive leaves out.
    """

    action: str
    would_touch: int
    matching: int
    owners: dict[str, int] = {}
    refused: int = 0
    left_out: int = 0
    left_out_reason: str | None = None
    items: list[dict[str, Any]] = []


T = TypeVar("T", bound=BaseModel)


class Page(BaseModel, Generic[T]):
    """One page of a listing; pass `next_cursor` back as ``cursor`` for the next (None: the last)."""

    model_config = ConfigDict(frozen=True)

    items: list[T]
    next_cursor: str | None = None
