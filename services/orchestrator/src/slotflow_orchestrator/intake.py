"""Intake: consumed records become waiting inputs of their workflow, once.

Any orchestrator may consume any record (the group spreads the three topics' partitions); it
writes the record into `inputs` with the shard of its workflow, and the shard's lease holder
decides. Redeliveries collapse on the inbox (the topic-qualified envelope id) in the same
transaction, so a record is recorded once however often Kafka delivers it, and the offsets are
committed only after that transaction.

What is recorded: every workflow command; RunCompleted and RunDeadLettered of activities (the
outcomes that become history; started, retrying and failed attempts are the claimer's business);
every TimerFired (the ticker fires TimerFired only for workflow timers); the dlq's redrive requests
for a workflow's parked activity (the decision retries it or refuses, and answers).

An outcome (RunCompleted, RunDeadLettered, TimerFired) is recorded with its origin and its value
byte-exact: the decision checks it against its issuer's record (`slotflow.issuers`) and parks a
refused one in the DLQ from there. Its inbox id carries a digest of its bytes besides its envelope
id, so a forged record that borrows a genuine one's id (they are derived, hence guessable: a
TimerFired's is `timer:{timer_id}`) cannot make the genuine record look like a redelivery; two
copies of one outcome are harmless, since only the first finds something pending.

A workflow command whose principal is not proven (signatures required: `slotflow.principals`) is
recorded in the inbox like any other and becomes no input: the caller stages its CommandRejected
in the same transaction, so nothing of it is ever decided on.
"""

import base64
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import asyncpg

from slotflow import tracing
from slotflow.contracts import (
    CancelWorkflow,
    Message,
    RedriveRequested,
    RetryActivity,
    RunCompleted,
    RunDeadLettered,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
)
from slotflow.contracts.codec import encode
from slotflow.core.identity import activity_run_id
from slotflow.kafka.loop import DEFAULT_OUTAGE_TYPES, Incoming
from slotflow.kafka.producer import key_partition
from slotflow.kafka.records import Record
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool
from slotflow.pg.statements import sql
from slotflow_orchestrator.sql import (
    PRUNE_INBOX,
    RECORD_CONSUMED,
    RECORD_SEEN,
)

COMMANDS = (StartWorkflow, SignalWorkflow, CancelWorkflow, TerminateWorkflow, RetryActivity)
#: What the intake waits out rather than parks. asyncpg's InternalClientError ("cannot switch to
#: state ...") is what a connection released while the server shuts down (a fast PostgreSQL
#: restart) raises: an outage, not something wrong with the record. Counted as anything else, a
#: workflow's input is retried ten times and then parked in the DLQ, and the workflow waits for a
#: redrive.
OUTAGES: tuple[type[BaseException], ...] = (
    *DEFAULT_OUTAGE_TYPES,
    *CONNECTION_ERRORS,
    asyncpg.InternalClientError,
)


def workflow_of(message: Message) -> str | None:
    """The workflow an input belongs to, or None when it is nothing for the orchestrator."""
    if isinstance(message, COMMANDS):
        return message.workflow_id
    if isinstance(message, RunCompleted | RunDeadLettered):
        return message.workflow_id if message.sequence is not None else None
    if isinstance(message, TimerFired):
        return message.owner
    if isinstance(message, RedriveRequested):
        return message.workflow_id if workflow_redrive(message) else None
    return None


def workflow_redrive(request: RedriveRequested) -> bool:
    """Whether ``request`` asks the orchestrator to retry a workflow's parked activity (an input of
    that workflow's decision)."""
    return (
        request.target == "orchestrator"
        and request.kind == "activity"
        and request.workflow_id is not None
        and request.sequence is not None
    )


#: What another service reports: checked against its issuer's record when decided, parked if refused.
OUTCOMES = (RunCompleted, RunDeadLettered, TimerFired)


def inbox_id(topic: str, envelope_id: str, value: bytes, *, outcome: bool) -> str:
    """The inbox id of a consumed record: topic-qualified (ids are unique per topic only), and for
    an outcome also its bytes' digest (see the module docstring)."""
    if not outcome:
        return f"{topic}:{envelope_id}"
    return f"{topic}:{envelope_id}#{hashlib.sha256(value).hexdigest()[:32]}"


@functools.lru_cache(maxsize=256)
def headers_text(headers: tuple[tuple[str, bytes], ...]) -> str:
    """A record's headers as JSON text for `origin_headers`: in order, duplicates kept, each value
    base64 (byte-exact, and jsonb holds no NUL). Outcomes mostly carry the same few headers (their
    type and version; a trace context only with tracing on): each distinct set is encoded once."""
    return json.dumps([[key, base64.b64encode(value).decode()] for key, value in headers])


def trace_parent(record: Record) -> str | None:
    """The `traceparent` a consumed record carries, kept with its input while tracing is on (off,
    nothing is written: docs/tracing.md)."""
    if not tracing.enabled():
        return None
    return tracing.storable_traceparent(record.header(tracing.TRACEPARENT))


def backed_run_id(message: Message) -> str | None:
    """The run an activity outcome names, if it is the outcome's own `{workflow_id}/{sequence}`
    (the only run id the claimer's record can back), or the run of the activity a retry names (the
    decision reads the claimer's record of it); None for anything else."""
    if isinstance(message, RetryActivity):
        return activity_run_id(message.workflow_id, message.sequence)
    if isinstance(message, RedriveRequested) and workflow_redrive(message):
        return activity_run_id(str(message.workflow_id), int(message.sequence or 0))
    if (
        isinstance(message, RunCompleted | RunDeadLettered)
        and message.workflow_id is not None
        and message.sequence is not None
        and message.run_id == activity_run_id(message.workflow_id, message.sequence)
    ):
        return message.run_id
    return None


def shard_of(workflow_id: str, shards: int) -> int:
    """The command-topic partition ``workflow_id`` hashes to (the default partitioner's choice)."""
    return key_partition(workflow_id, shards)


@dataclass(frozen=True, slots=True)
class Admitted:
    """Inputs newly recorded by one batch, per shard (to wake a local decider)."""

    shards: frozenset[int]
    types: tuple[str, ...]
    #: Commands seen for the first time and refused before becoming inputs, with the reason.
    refused: tuple[tuple[Incoming, str], ...] = field(default=())


#: Why a command may not become an input (its principal is not proven), or None when it may.
Refuse = Callable[[Incoming], str | None]


async def admit(
    conn: Conn, *, schema: str, shards: int, batch: Sequence[Incoming], refuse: Refuse | None = None
) -> Admitted:
    """Record ``batch``'s inputs in the caller's transaction; redeliveries add nothing.

    A command that ``refuse`` gives a reason for is recorded in the inbox (refused once) but
    becomes no input; it is returned in `Admitted.refused` for the caller to answer."""
    wanted: dict[str, tuple[Incoming, str]] = {}
    for incoming in batch:
        workflow_id = workflow_of(incoming.message)
        if workflow_id is None:
            continue
        record = incoming.record
        event_id = inbox_id(
            record.topic,
            incoming.envelope.id,
            record.value or b"",
            outcome=isinstance(incoming.message, OUTCOMES),
        )
        wanted.setdefault(event_id, (incoming, workflow_id))
    if not wanted:
        return Admitted(frozenset(), ())
    ids = list(wanted)
    fresh = await conn.fetch(sql(RECORD_SEEN, schema), ids, [wanted[i][0].record.topic for i in ids])
    seen_first = {r["event_id"] for r in fresh}
    # In consumed order, which is each partition's order: a workflow's inputs apply in it.
    new = [wanted[i] for i in ids if i in seen_first]
    refused: list[tuple[Incoming, str]] = []
    if refuse is not None:
        kept = []
        for incoming, workflow_id in new:
            reason = refuse(incoming) if isinstance(incoming.message, COMMANDS) else None
            if reason is None:
                kept.append((incoming, workflow_id))
            else:
                refused.append((incoming, reason))
        new = kept
    if not new:
        return Admitted(frozenset(), (), tuple(refused))
    workflow_ids = [workflow_id for _, workflow_id in new]
    shard_ids = [shard_of(w, shards) for w in workflow_ids]
    # Only an outcome can be refused, so only its origin is kept.
    origins = [incoming.record if isinstance(incoming.message, OUTCOMES) else None for incoming, _ in new]
    await conn.execute(
        sql(RECORD_CONSUMED, schema),
        workflow_ids,
        shard_ids,
        [incoming.envelope.type for incoming, _ in new],
        # The value as consumed: it decoded to this envelope, and a dead letter carries it exact.
        [incoming.record.value or encode(incoming.envelope) for incoming, _ in new],
        [o.topic if o else None for o in origins],
        [o.partition if o else None for o in origins],
        [o.offset if o else None for o in origins],
        [o.key if o else None for o in origins],
        [headers_text(o.headers) if o else None for o in origins],
        [o.timestamp_ms if o else None for o in origins],
        [backed_run_id(incoming.message) for incoming, _ in new],
        [trace_parent(incoming.record) for incoming, _ in new],
    )
    return Admitted(
        frozenset(shard_ids), tuple(incoming.envelope.type for incoming, _ in new), tuple(refused)
    )


async def prune_inbox(pool: Pool, *, schema: str, older_than_seconds: float) -> int:
    """Forget inbox ids recorded more than ``older_than_seconds`` ago; returns how many."""
    status = await pool.execute(sql(PRUNE_INBOX, schema), older_than_seconds)
    return int(status.rsplit(" ", 1)[1])
