"""What a decision sends, as outbox rows: history, JobDue, timers, child starts, acknowledgements.

Every envelope id is derived from the history, so a decision re-staged after a crash (it cannot be:
its transaction either committed or left nothing) or a relay that publishes twice produces the
same ids, which every consumer collapses:

- history event: `{workflow_id}#{sequence}` (the contract's `history_event_id`);
- JobDue of an activity: its run id `{workflow_id}/{sequence}` (first attempt; retries are the
  claimer's, with its own ids); a parked activity's retry: `{run id}/redrive/{n}`;
- the answer to a redrive request: `redrive:{request id}/outcome`;
- StartTimer of a workflow timer: `{timer_id}/start`; CancelTimer: `{timer_id}/cancel`;
- CancelActivity of an abandoned activity: `{run id}/cancel` (`cancel_activity_id`);
- a child's StartWorkflow: the command id the runtime chose;
- CommandAccepted/CommandRejected: `{command_id}/accepted` or `/rejected`;
- the dead letter of a refused input (`slotflow.issuers`): its record's position, as every
  consumer parks (`slotflow.kafka.poison.dead_letter_envelope`).
"""

from collections.abc import Sequence
from datetime import datetime

from pydantic_core import to_json

from slotflow.contracts import (
    ActivityScheduled,
    CancelActivity,
    CancelTimer,
    CancelWorkflow,
    CommandAccepted,
    CommandRejected,
    FireTimerFired,
    HistoryEvent,
    JobDue,
    Message,
    StartTimer,
    StartWorkflow,
    TimerFired,
    TimerStarted,
    history_event_id,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import fit_id, fit_key
from slotflow.contracts.routing import build_command
from slotflow.contracts.runs import RunEvent, cancel_activity_id
from slotflow.contracts.timers import execution_timer_id
from slotflow.contracts.topics import (
    ACTIVITY_CANCELS,
    DLQ_MESSAGES,
    JOBS_DUE,
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_EVENTS,
    WORKFLOW_HISTORY,
)
from slotflow.core.identity import job_due_event_id
from slotflow.history import OpenWork
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.records import Record
from slotflow.kafka.redrive import Answer, outcome_envelope
from slotflow.pg.outbox import Encoded, Staged, headers_json
from slotflow.principals import Signer
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.stepping import Ack, Refusal, Step, deadline_timer_id
from slotflow_orchestrator.workflow_code import child_start_id

SOURCE = "orchestrator"


class Outbound:
    """Builds the outbox rows of a step for one deployment's topic names."""

    def __init__(self, kafka: KafkaSettings, *, signer: Signer | None = None) -> None:
        self._kafka = kafka
        #: Signs the commands the orchestrator sends (timers, child starts and cancels) as its own
        #: principal, so a deployment requiring signatures accepts them (docs/security.md).
        self._signer = signer
        self._history = kafka.topic(WORKFLOW_HISTORY)
        self._jobs = kafka.topic(JOBS_DUE)
        self._events = kafka.topic(WORKFLOW_EVENTS)
        self._dlq = kafka.topic(DLQ_MESSAGES)
        self._cancels = kafka.topic(ACTIVITY_CANCELS)
        # The stored header JSON of each history event type (the same for every event of a type).
        self._headers: dict[str, str] = {}

    def rows(
        self,
        out: Step,
        stored: Sequence[HistoryEvent],
        *,
        now: datetime,
        stored_json: Sequence[str] | None = None,
    ) -> list[Staged | Encoded]:
        """The step's records; the history as ``stored`` (large payloads by reference), the
        actions from the events themselves (a claimer gets the activity's payload, not a ref).

        ``stored_json`` is each stored event's JSON as the history table keeps it (the caller has
        it already); a history record's envelope is built around that text, not from the model
        again (`history_row`)."""
        staged: list[Staged | Encoded] = []
        wf = out.workflow_id
        texts = stored_json if stored_json is not None else [e.model_dump_json() for e in stored]
        for event, text in zip(stored, texts, strict=True):
            staged.append(self.history_row(wf, event, text, now))
        for event in out.events:
            if isinstance(event, ActivityScheduled):
                staged.append(self._job_due(event, now))
                if event.schedule_to_close_deadline is not None:
                    timer_id = deadline_timer_id(event.run_id)
                    deadline = StartTimer(
                        timer_id=timer_id,
                        fire_at=event.schedule_to_close_deadline,
                        on_fire=FireTimerFired(owner=wf, sequence=event.sequence),
                    )
                    staged.append(self._command(deadline, f"{timer_id}/start", now))
            elif isinstance(event, TimerStarted) and event.sequence not in out.fired_here:
                staged.append(
                    self._command(
                        StartTimer(
                            timer_id=event.timer_id,
                            fire_at=event.fire_at,
                            on_fire=FireTimerFired(owner=wf, sequence=event.sequence),
                        ),
                        f"{event.timer_id}/start",
                        now,
                    )
                )
        for timer in out.timers:
            staged.append(
                self._command(
                    StartTimer(
                        timer_id=timer.timer_id, fire_at=timer.fire_at, on_fire=FireTimerFired(owner=wf)
                    ),
                    f"{timer.timer_id}/start",
                    now,
                )
            )
        for timer_id in out.cancel_timers:
            staged.append(self._command(CancelTimer(timer_id=timer_id), f"{timer_id}/cancel", now))
        for command_id, start in out.children:
            staged.append(self._command(start, command_id, now))
        for command_id, cancel in out.cancels:
            staged.append(self._command(cancel, command_id, now))
        for activity, redrive in out.reissues:
            staged.append(self._job_due(activity, now, redrive=redrive))
        for activity, reason in out.activity_cancels.values():
            staged.append(self.activity_cancel(activity, reason, now))
        staged.extend(self._ack(ack, now) for ack in out.acks)
        staged.extend(self.dead_letter(refusal, now) for refusal in out.refused)
        for answered in out.redrive_answers:
            answer = Answer.done(answered.reason) if answered.done else Answer.refused(answered.reason)
            outcome = outcome_envelope(answered.request, service=SOURCE, answer=answer, at=now)
            staged.append(Staged(self._dlq, outcome))
        return staged

    def activity_cancel(self, activity: ActivityScheduled, reason: str, now: datetime) -> Staged:
        """The CancelActivity of an activity its workflow abandoned, for the claimers (internal
        topic; not signed: only the orchestrator writes it, and the claimer checks it against the
        orchestrator's `activity_cancels` row written in the same transaction)."""
        cancel = CancelActivity(
            workflow_id=activity.workflow_id,
            sequence=activity.sequence,
            run_id=activity.run_id,
            handler=activity.activity,
            reason=reason[:1000],
        )
        envelope = wrap(
            cancel,
            id=fit_id(cancel_activity_id(activity.run_id)),
            key=fit_key(activity.workflow_id),
            source=SOURCE,
            occurred_at=now,
        )
        return Staged(self._cancels, envelope)

    def reissue(
        self,
        workflow_id: str,
        work: OpenWork,
        *,
        execution_deadline: datetime | None,
        unanswered: Sequence[Ack],
        now: datetime,
    ) -> list[Staged]:
        """What the decisions that left ``work`` open sent for it, staged again under the same ids
        (a rebuild: the outbox rows that were not yet relayed died with the schema). Every reader
        collapses a record it has seen: the claimer claims a run id once, the ticker takes a timer
        id once, a child's orchestrator records a command id once, answers are read by id.

        A run that ended gets its open children's cancels (policy `request_cancel`) again; the
        cancels of its timers are not needed (a late firing finds nothing pending)."""
        staged: list[Staged] = []
        if work.ended:
            for child in work.children.values():
                if child.parent_close_policy == "request_cancel":
                    cancel = CancelWorkflow(
                        workflow_id=child.child_workflow_id, reason=f"parent {workflow_id} ended"
                    )
                    staged.append(self._command(cancel, f"{workflow_id}#{child.sequence}/cancel-child", now))
            return staged
        for activity in work.activities.values():
            staged.append(self._job_due(activity, now))
            if activity.schedule_to_close_deadline is not None:
                timer_id = deadline_timer_id(activity.run_id)
                deadline = StartTimer(
                    timer_id=timer_id,
                    fire_at=activity.schedule_to_close_deadline,
                    on_fire=FireTimerFired(owner=workflow_id, sequence=activity.sequence),
                )
                staged.append(self._command(deadline, f"{timer_id}/start", now))
        for timer in work.timers.values():
            start = StartTimer(
                timer_id=timer.timer_id,
                fire_at=timer.fire_at,
                on_fire=FireTimerFired(owner=workflow_id, sequence=timer.sequence),
            )
            staged.append(self._command(start, f"{timer.timer_id}/start", now))
        if execution_deadline is not None:
            timer_id = execution_timer_id(workflow_id, work.chain_start)
            start = StartTimer(
                timer_id=timer_id, fire_at=execution_deadline, on_fire=FireTimerFired(owner=workflow_id)
            )
            staged.append(self._command(start, f"{timer_id}/start", now))
        for child in work.children.values():
            child_start = StartWorkflow(
                workflow_id=child.child_workflow_id,
                workflow_type=child.workflow_type,
                input=child.input,
                parent_workflow_id=workflow_id,
                parent_sequence=child.sequence,
                parent_close_policy=child.parent_close_policy,
                memo=child.memo,
                search_attributes=child.search_attributes,
            )
            staged.append(self._command(child_start, child_start_id(workflow_id, child.sequence), now))
        staged.extend(self._ack(ack, now) for ack in unanswered)
        return staged

    def consumed_topic(self, message: Message) -> str:
        """The topic an outcome input was consumed from (the runs' or the timers' events)."""
        return self._kafka.topic(TIMER_EVENTS if isinstance(message, TimerFired) else RUN_EVENTS)

    def dead_letter(self, refusal: Refusal, now: datetime) -> Staged:
        """The refused input's record parked in the DLQ with its verdict's reason and detail.

        An input recorded before its origin was kept has no Kafka position: its letter names the
        input (partition -1, offset = the input's seq) and carries its stored value.
        """
        waiting = refusal.input
        record = waiting.origin
        if record is None:
            envelope = waiting.envelope
            record = Record(
                topic=self.consumed_topic(waiting.message),
                partition=-1,
                offset=waiting.seq,
                key=envelope.key.encode(),
                value=waiting.raw or encode(envelope),
                headers=(),
                timestamp_ms=None,
            )
        message = waiting.message
        letter = dead_letter_envelope(
            record,
            refusal.verdict.error(),
            source_service=SOURCE,
            occurred_at=now,
            run_id=message.run_id if isinstance(message, RunEvent) else None,
            job_id=message.job_id if isinstance(message, RunEvent) else None,
        )
        return Staged(self._dlq, letter)

    def history_row(self, workflow_id: str, event: HistoryEvent, text: str, now: datetime) -> Encoded:
        """One history event as its outbox row, its envelope spliced around ``text`` (the event's
        JSON): the hot path of every decision (about eight events a workflow), which skips
        dumping, validating and serialising each event a second time. The envelope's other
        fields are serialised by pydantic-core as the model does, in the model's order, and
        `data` comes last, so the bytes are those of `encode(wrap(event, ...))`
        (tests/unit/orchestrator/test_outbound.py pins that)."""
        event_id = history_event_id(workflow_id, event.sequence)
        head = to_json(
            {
                "type": event.message_type,
                "version": event.message_version,
                "id": event_id,
                "key": workflow_id,
                "occurred_at": now,
                "source": SOURCE,
            }
        )
        value = b"".join((head[:-1], b',"data":', text.encode(), b"}"))
        headers = self._headers.get(event.message_type)
        if headers is None:
            headers = self._headers[event.message_type] = headers_json(
                event.message_type, event.message_version
            )
        return Encoded(self._history, event_id, workflow_id, value, headers)

    def _job_due(self, event: ActivityScheduled, now: datetime, *, redrive: int = 0) -> Staged:
        """The activity's JobDue from its ActivityScheduled: its first, or a parked one's retry
        (``redrive``: the run's next redrive number, under which the claimer reopens it once)."""
        due = JobDue(
            run_id=event.run_id,
            job_id=event.workflow_id,
            slot=now,
            attempt=1,
            kind="activity",
            handler=event.activity,
            payload=event.payload,
            retry=event.retry,
            workflow_id=event.workflow_id,
            sequence=event.sequence,
            on_dead_letter=event.on_dead_letter,
            redrive=redrive,
        )
        envelope = wrap(
            due,
            id=job_due_event_id(event.run_id, 1, redrive),
            key=event.workflow_id,
            source=SOURCE,
            occurred_at=now,
        )
        return Staged(self._jobs, envelope)

    def _command(self, message: Message, command_id: str, now: datetime) -> Staged:
        spec, envelope = build_command(message, command_id=command_id, source=SOURCE, occurred_at=now)
        topic = self._kafka.topic(spec)
        if self._signer is not None:
            # Signed when staged, dated by the database's clock: the relay publishes it soon after,
            # and the replay window (7 days by default) outlasts any outage the relay waits out.
            envelope = self._signer.sign(envelope, topic=topic, signed_at=now)
        return Staged(topic, envelope)

    def rejection(
        self, command_id: str, command_type: str, subject: str, reason: str, now: datetime
    ) -> Staged:
        """The CommandRejected of a command refused before it became an input (an unproven principal)."""
        return self._ack(Ack(command_id, command_type, subject, reason), now)

    def _ack(self, ack: Ack, now: datetime) -> Staged:
        message: Message
        if ack.reason is None:
            message = CommandAccepted(
                command_id=ack.command_id, command_type=ack.command_type, subject=ack.subject
            )
            suffix = "accepted"
        else:
            message = CommandRejected(
                command_id=ack.command_id,
                command_type=ack.command_type,
                subject=ack.subject,
                reason=ack.reason,
            )
            suffix = "rejected"
        # The command id may already be at the envelope's limit (issue 23): fit_id keeps the
        # derived id within it, deterministically.
        envelope = wrap(
            message,
            id=fit_id(ack.command_id, f"/{suffix}"),
            key=fit_key(ack.subject),
            source=SOURCE,
            occurred_at=now,
        )
        return Staged(self._events, envelope)
