"""The envelopes the ticker stages in its outbox. Pure: ids are deterministic, times are given.

Every id is derived from what the event is about (a run id, a command id), never drawn at
random, so staging the same fact twice collapses on the outbox's unique (topic, event_id).
"""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

from pydantic_core import to_json

from slotflow import tracing
from slotflow.contracts import (
    CommandAccepted,
    CommandRejected,
    JobDue,
    Message,
    ScheduleDefinition,
    SlotSkipped,
    TimerFired,
    wrap,
)
from slotflow.contracts.acceptance import ID_CONTROL, id_refusal
from slotflow.contracts.envelope import fit_id, fit_key
from slotflow.contracts.policies import OverlapPolicy
from slotflow.contracts.topics import DLQ_MESSAGES, JOBS_DUE, SCHEDULE_EVENTS, TIMER_EVENTS
from slotflow.core.cronslots import SkippedSlot
from slotflow.core.identity import job_due_event_id, run_id, slot_label
from slotflow.core.nul import REPLACEMENT, storable
from slotflow.pg.outbox import Encoded, Staged, append_encoded, encoded, headers_json, with_headers
from slotflow.pg.pool import Conn
from slotflow.settings import KafkaSettings
from slotflow_ticker.memo import IdentityMemo

JobKind = Literal["scheduled", "manual", "backfill", "retry", "activity"]
#: What the ticker stages: envelopes, or (on the claim's hot path) rows it encoded itself.
Outgoing = Staged | Encoded
_JOB_DUE_HEADERS = headers_json(JobDue.message_type, JobDue.message_version)
#: The instrumentation scope of the ticker's spans.
TRACE_SCOPE = "slotflow.ticker"
#: A rejection's reason is cut here (a poison's message can quote a long key).
REASON_CHARS = 4000


async def stage_all(conn: Conn, *, schema: str, items: Iterable[Outgoing]) -> int:
    """Stage ``items`` in the caller's transaction with one statement; returns how many were new."""
    return await append_encoded(
        conn, schema=schema, rows=[i if isinstance(i, Encoded) else encoded(i) for i in items]
    )


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=8192)
def _label(slot: datetime) -> str:
    # Schedules due together share their slot instant, so a claim formats each label once.
    return slot_label(slot)


def _build_job_template(definition: ScheduleDefinition, _: None) -> dict[str, Any]:
    return JobDue(
        run_id="-",
        job_id="-",
        slot=_EPOCH,
        handler=definition.handler,
        payload=definition.payload,
        retry=definition.retry,
        overlap=definition.overlap,
        tags=definition.tags,
        fire_at=_EPOCH,
    ).model_dump(mode="json")


#: A JobDue of each definition validated and dumped to JSON types once; the per-run fields are
#: placeholders that `EventFactory.job_due` overwrites (dict order, hence field order, is kept).
_JOB_TEMPLATES: IdentityMemo[ScheduleDefinition, None, dict[str, Any]] = IdentityMemo(
    _build_job_template, limit=20_000
)


@dataclass(frozen=True, slots=True)
class Topics:
    """The deployment's topic names for everything the ticker writes."""

    jobs: str
    schedule_events: str
    timer_events: str
    dlq: str

    @classmethod
    def of(cls, settings: KafkaSettings) -> "Topics":
        return cls(
            jobs=settings.topic(JOBS_DUE),
            schedule_events=settings.topic(SCHEDULE_EVENTS),
            timer_events=settings.topic(TIMER_EVENTS),
            dlq=settings.topic(DLQ_MESSAGES),
        )


@dataclass(frozen=True, slots=True)
class EventFactory:
    """Builds staged envelopes for one ticker replica."""

    topics: Topics
    source: str

    def job_due(
        self,
        schedule_id: str,
        definition: ScheduleDefinition,
        slot: datetime,
        *,
        kind: JobKind,
        fire_at: datetime,
        occurred_at: datetime,
    ) -> Encoded:
        """JobDue for one slot: envelope id = run id (first attempt), key = job id = schedule id.

        The hot path of every claim. Everything a definition fixes is validated and dumped once
        per definition (`_JOB_TEMPLATES`); per slot only the run's own fields are filled in. The
        bytes equal those of `wrap(JobDue(...))` (tests/unit/ticker pins that).
        """
        run = f"{schedule_id}@{_label(slot)}"
        data = dict(_JOB_TEMPLATES.get(definition, None))
        data.update(run_id=run, job_id=schedule_id, slot=slot, kind=kind, fire_at=fire_at)
        event_id = job_due_event_id(run, 1)
        # Field for field the Envelope model, in its order; pydantic's own serializer formats it.
        value = to_json(
            {
                "type": JobDue.message_type,
                "version": JobDue.message_version,
                "id": event_id,
                "key": schedule_id,
                "occurred_at": occurred_at,
                "source": self.source,
                "data": data,
            }
        )
        row = Encoded(self.topics.jobs, event_id, schedule_id, value, _JOB_DUE_HEADERS)
        if tracing.enabled():
            # The root of the run's trace (or a child of the command that caused it).
            created = tracing.produced(
                TRACE_SCOPE,
                self.topics.jobs,
                message_id=event_id,
                key=schedule_id,
                attributes=tracing.run_attributes(
                    run_id=run,
                    job_id=schedule_id,
                    slot=slot,
                    attempt=1,
                    kind=kind,
                    handler=definition.handler,
                ),
            )
            row = with_headers(row, created)
        return row

    def job_due_validated(
        self,
        schedule_id: str,
        definition: ScheduleDefinition,
        slot: datetime,
        *,
        kind: JobKind,
        fire_at: datetime,
        occurred_at: datetime,
    ) -> Staged:
        """`job_due` built through the models, every field validated (the reference for tests)."""
        message = JobDue(
            run_id=run_id(schedule_id, slot),
            job_id=schedule_id,
            slot=slot,
            kind=kind,
            handler=definition.handler,
            payload=definition.payload,
            retry=definition.retry,
            overlap=definition.overlap,
            tags=definition.tags,
            fire_at=fire_at,
        )
        return self.job_due_message(message, occurred_at=occurred_at)

    def backfill_due(
        self,
        schedule_id: str,
        definition: ScheduleDefinition,
        slot: datetime,
        *,
        overlap: OverlapPolicy,
        max_concurrent: int,
        occurred_at: datetime,
    ) -> Staged:
        """JobDue for one backfilled slot, under the backfill's overlap policy and concurrency."""
        message = JobDue(
            run_id=run_id(schedule_id, slot),
            job_id=schedule_id,
            slot=slot,
            kind="backfill",
            handler=definition.handler,
            payload=definition.payload,
            retry=definition.retry,
            overlap=overlap,
            max_concurrent=max_concurrent,
            tags=definition.tags,
            fire_at=occurred_at,
        )
        return self.job_due_message(message, occurred_at=occurred_at)

    def job_due_message(
        self, message: JobDue, *, occurred_at: datetime, parent: tracing.Context | None = None
    ) -> Staged:
        """A ready JobDue (a timer's retry attempt): id from its run id and attempt.

        Its span hangs below ``parent`` (a retry: the failed attempt's outcome) or the current span.
        """
        envelope = wrap(
            message,
            id=job_due_event_id(message.run_id, message.attempt, message.redrive, message.rerun),
            key=message.job_id,
            source=self.source,
            occurred_at=occurred_at,
        )
        created = tracing.produced(
            TRACE_SCOPE,
            self.topics.jobs,
            message_id=envelope.id,
            key=message.job_id,
            parent=parent,
            attributes=tracing.run_attributes(
                run_id=message.run_id,
                job_id=message.job_id,
                slot=message.slot,
                attempt=message.attempt,
                kind=message.kind,
                handler=message.handler,
                workflow_id=message.workflow_id,
            ),
        )
        return Staged(self.topics.jobs, envelope, created or None)

    def slot_skipped(self, schedule_id: str, skipped: SkippedSlot, *, occurred_at: datetime) -> Staged:
        run = run_id(schedule_id, skipped.at)
        message = SlotSkipped(
            schedule_id=schedule_id, run_id=run, slot=skipped.at, reason=skipped.reason, detail=skipped.detail
        )
        event_id = f"{run}/skipped"
        if skipped.reason == "dst_nonexistent":
            # Every nominal time lost in one DST gap shares the transition instant; the detail
            # names which one, so it keeps their records apart.
            event_id += "/" + hashlib.sha256(skipped.detail.encode()).hexdigest()[:16]
        return self.schedule_event(message, id=event_id, key=schedule_id, occurred_at=occurred_at)

    def timer_fired(
        self, timer_id: str, *, owner: str, sequence: int | None, fire_at: datetime, fired_at: datetime
    ) -> Staged:
        message = TimerFired(
            timer_id=timer_id, owner=owner, sequence=sequence, fire_at=fire_at, fired_at=fired_at
        )
        envelope = wrap(message, id=f"timer:{timer_id}", key=owner, source=self.source, occurred_at=fired_at)
        return Staged(self.topics.timer_events, envelope)

    def schedule_event(self, message: Message, *, id: str, key: str, occurred_at: datetime) -> Staged:
        envelope = wrap(message, id=id, key=key, source=self.source, occurred_at=occurred_at)
        return Staged(self.topics.schedule_events, envelope)

    def accepted(self, *, command_id: str, command_type: str, subject: str, occurred_at: datetime) -> Staged:
        message = CommandAccepted(command_id=command_id, command_type=command_type, subject=subject)
        return self.schedule_event(
            message, id=fit_id(command_id, "/accepted"), key=fit_key(subject), occurred_at=occurred_at
        )

    def rejected(
        self, *, command_id: str, command_type: str, subject: str, reason: str, occurred_at: datetime
    ) -> Staged:
        """CommandRejected; the texts may come from a hostile record, so each is made to fit.

        The command id is echoed whole (the sender looks for it) but storable, a NUL or control
        character replaced; cut with a digest only if that replacement (three bytes for a NUL's
        one) took it past the id limit. The envelope id, the key and the subject are cut with a
        digest where too long (`fit_id`).
        """
        echoed = ID_CONTROL.sub(REPLACEMENT, storable(command_id))
        if id_refusal(echoed, "command_id") is not None:
            echoed = fit_id(command_id)
        message = CommandRejected(
            command_id=echoed,
            command_type=fit_key(command_type, limit=200),
            subject=fit_key(subject),
            reason=storable(reason[:REASON_CHARS]),
        )
        return self.schedule_event(
            message, id=fit_id(command_id, "/rejected"), key=fit_key(subject), occurred_at=occurred_at
        )
