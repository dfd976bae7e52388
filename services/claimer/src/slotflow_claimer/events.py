"""The records a run's state changes stage in the outbox, built from the row the change returned.

Envelope ids are deterministic and carry the fence token, which is unique per claim: a run taken
over and started again publishes a second RunStarted (a new owner, a new token), while re-staging
the same claim's event collapses on the outbox's (topic, id) key.
"""

import functools
from datetime import datetime, timedelta
from typing import Any

from pydantic_core import to_json

from slotflow.contracts import (
    CancelTimer,
    FireJobDue,
    JobDue,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
    StartTimer,
    wrap,
)
from slotflow.contracts.envelope import Envelope, Message
from slotflow.contracts.timers import resume_timer_id, retry_timer_id
from slotflow.contracts.topics import DLQ_MESSAGES, RUN_EVENTS, TIMER_COMMANDS
from slotflow.core.identity import job_due_event_id
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.pg.outbox import Encoded, Staged, headers_json
from slotflow.principals import Signer
from slotflow.settings import KafkaSettings
from slotflow_claimer.runs import Run

SOURCE = "claimer"
#: The instrumentation scope of the claimer's spans.
TRACE_SCOPE = "slotflow.claimer"


class RunEvents:
    """Builds staged records for one deployment's topic names."""

    def __init__(self, kafka: KafkaSettings, *, signer: Signer | None = None) -> None:
        self._run_events = kafka.topic(RUN_EVENTS)
        # Timer commands go on the internal topic only the claimer and the orchestrator may write:
        # a StartTimer fires whatever JobDue it carries, so the public command topic never takes one.
        self._commands = kafka.topic(TIMER_COMMANDS)
        self._dlq = kafka.topic(DLQ_MESSAGES)
        #: Signs the claimer's timer commands as its own principal, so a deployment requiring
        #: signatures accepts them (docs/security.md).
        self._signer = signer

    @property
    def dlq_topic(self) -> str:
        return self._dlq

    def _run_event(self, run: Run, message: Message, what: str, at: datetime) -> Staged:
        # Built without re-validating: every field comes from a typed, constrained database row
        # (tests/unit/claimer/test_events.py checks the result validates as the contract).
        envelope = Envelope.model_construct(
            type=message.message_type,
            version=message.message_version,
            id=f"{run.run_id}/{run.fence_token}/{what}",
            key=run.job_id,
            occurred_at=at,
            source=SOURCE,
            data=message.model_dump(mode="json"),
        )
        return Staged(self._run_events, envelope)

    @staticmethod
    def _common(run: Run) -> dict[str, Any]:
        return {
            "run_id": run.run_id,
            "job_id": run.job_id,
            "slot": run.slot,
            "attempt": run.attempt,
            "fence_token": run.fence_token,
            "owner": run.owner or "",
            "workflow_id": run.workflow_id,
            "sequence": run.sequence,
            "handler": run.handler,
        }

    def _run_row(
        self, run: Run, message: type[Message], what: str, at: datetime, data: dict[str, Any]
    ) -> Encoded:
        # The hot path (two rows per run): the envelope as a plain dict serialised once by
        # pydantic-core, which formats datetimes as the models do; no model is built.
        # tests/unit/claimer/test_events.py checks it equals the envelope `started`/`completed` build.
        value = to_json(
            {
                "type": message.message_type,
                "version": message.message_version,
                "id": f"{run.run_id}/{run.fence_token}/{what}",
                "key": run.job_id,
                "occurred_at": at,
                "source": SOURCE,
                "data": data,
            }
        )
        return Encoded(
            self._run_events,
            f"{run.run_id}/{run.fence_token}/{what}",
            run.job_id,
            value,
            _headers(message.message_type, message.message_version),
        )

    def started_row(self, run: Run, at: datetime) -> Encoded:
        """`started` as the outbox row, built without models."""
        data = self._common(run)
        data["started_at"] = run.started_at or at
        return self._run_row(run, RunStarted, "started", at, data)

    def completed_row(self, run: Run, at: datetime, *, logs: tuple[str, ...] = ()) -> Encoded:
        """`completed` as the outbox row, built without models."""
        finished = run.finished_at or at
        data = self._common(run)
        data["result"] = run.result
        data["started_at"] = run.started_at or finished
        data["finished_at"] = finished
        data["logs"] = list(logs)
        return self._run_row(run, RunCompleted, "completed", at, data)

    def started(self, run: Run, at: datetime) -> Staged:
        started_at = run.started_at or at
        return self._run_event(
            run, RunStarted.model_construct(**self._common(run), started_at=started_at), "started", at
        )

    def completed(self, run: Run, at: datetime, *, logs: tuple[str, ...] = ()) -> Staged:
        finished = run.finished_at or at
        message = RunCompleted.model_construct(
            **self._common(run),
            result=run.result,
            started_at=run.started_at or finished,
            finished_at=finished,
            logs=logs,
        )
        return self._run_event(run, message, "completed", at)

    def failed(
        self,
        run: Run,
        at: datetime,
        *,
        error_type: str,
        message: str,
        traceback: str,
        retryable: bool,
        logs: tuple[str, ...] = (),
    ) -> Staged:
        event = RunFailed.model_validate(
            {
                **self._common(run),
                "error_type": error_type,
                "message": message,
                "traceback": traceback,
                "retryable": retryable,
                "logs": logs,
                "finished_at": run.finished_at or at,
            }
        )
        return self._run_event(run, event, "failed", at)

    def retrying(
        self,
        run: Run,
        at: datetime,
        *,
        retry_at: datetime,
        delay: timedelta,
        held_reason: str | None = None,
    ) -> Staged:
        event = RunRetrying.model_validate(
            {
                **self._common(run),
                "next_attempt": run.attempt + 1,
                "retry_at": retry_at,
                "delay": delay,
                "held_reason": held_reason,
            }
        )
        return self._run_event(run, event, "retrying", at)

    def retry_timer(self, run: Run, at: datetime, *, retry_at: datetime) -> Staged:
        """StartTimer for the ticker: at `retry_at` it emits the next attempt's JobDue."""
        nxt = run.attempt + 1
        # A retry is an ordinary JobDue: the redrive number of the record it copies reopened the run once.
        job = run.job_due().model_copy(update={"attempt": nxt, "kind": "retry", "redrive": 0, "rerun": 0})
        job = JobDue.model_validate(job.model_dump())
        timer_id = retry_timer_id(run.run_id, nxt)
        timer = StartTimer(timer_id=timer_id, fire_at=retry_at, on_fire=FireJobDue(job=job))
        return self._command(timer, id=timer_id, key=timer_id, at=at)

    def resume_timers(self, run: Run, at: datetime, *, resume_at: datetime) -> list[Staged]:
        """A held run brought forward (its downstream closed): a StartTimer for the same next
        attempt at `resume_at`, and the CancelTimer of the hold's own, later timer.

        Both timers would emit the same JobDue (one envelope id, one attempt): should the old one
        fire anyway, its JobDue finds the attempt already claimed and is skipped as a duplicate.
        """
        nxt = run.attempt + 1
        # A retry is an ordinary JobDue: the redrive number of the record it copies reopened the run once.
        job = run.job_due().model_copy(update={"attempt": nxt, "kind": "retry", "redrive": 0, "rerun": 0})
        job = JobDue.model_validate(job.model_dump())
        timer_id = resume_timer_id(run.run_id, nxt)
        timer = StartTimer(timer_id=timer_id, fire_at=resume_at, on_fire=FireJobDue(job=job))
        held_timer = retry_timer_id(run.run_id, nxt)
        cancel = CancelTimer(timer_id=held_timer)
        return [
            self._command(timer, id=timer_id, key=timer_id, at=at),
            self._command(cancel, id=f"cancel:{held_timer}", key=held_timer, at=at),
        ]

    def cancel_retry_timer(self, run: Run, at: datetime) -> Staged:
        """CancelTimer of the retry timer that would start ``run``'s next attempt (the run was
        cancelled while it waited; should the timer fire anyway, its JobDue claims nothing)."""
        timer_id = retry_timer_id(run.run_id, run.attempt + 1)
        return self._command(CancelTimer(timer_id=timer_id), id=f"cancel:{timer_id}", key=timer_id, at=at)

    def _command(self, message: Message, *, id: str, key: str, at: datetime) -> Staged:
        envelope = wrap(message, id=id, key=key, source=SOURCE, occurred_at=at)
        if self._signer is not None:
            # Dated by the database's clock when staged; the replay window outlasts a relay outage.
            envelope = self._signer.sign(envelope, topic=self._commands, signed_at=at)
        return Staged(self._commands, envelope)

    def skipped(self, run: Run, at: datetime, *, reason: str) -> Staged:
        event = RunSkipped.model_validate({**self._common(run), "reason": reason})
        return self._run_event(run, event, "skipped", at)

    def dead_lettered(self, run: Run, at: datetime, *, reason: str, error: BaseException) -> list[Staged]:
        """RunDeadLettered for observers, and the DeadLettered record the DLQ service parks.

        An activity's final failure is its workflow's to handle (the orchestrator records it as
        ActivityFailed from RunDeadLettered): its letter is parked only when the workflow chose
        `on_dead_letter="park"`, marked with the workflow and sequence it is retried through
        (docs/decisions/0009). A schedule's run always parks one, with the redrives it had.
        """
        history = run.attempt_records()
        event = RunDeadLettered.model_validate(
            {
                **self._common(run),
                "reason": "attempts_exhausted" if reason == "attempts_exhausted" else "permanent_error",
                "history": history,
            }
        )
        staged = [self._run_event(run, event, "dead_lettered", at)]
        parked_activity = run.workflow_id is not None and _parks(run)
        if run.workflow_id is not None and not parked_activity:
            return staged
        letter = dead_letter_envelope(
            run.due,
            error,
            source_service=SOURCE,
            occurred_at=at,
            reason=reason,
            run_id=run.run_id,
            job_id=run.job_id,
            tags=run.tags,
            history=history,
            workflow_id=run.workflow_id if parked_activity else None,
            sequence=run.sequence if parked_activity else None,
            redrives=run.redrive_count,
        )
        return [*staged, Staged(self._dlq, letter)]


def _parks(run: Run) -> bool:
    """Whether the workflow chose to park this activity's run when the claimers give up (its JobDue
    says so; one that cannot be read back parks, so nothing is lost unseen)."""
    try:
        return run.job_due().on_dead_letter == "park"
    except Exception:  # noqa: BLE001 - a stored record that no longer decodes: keep the letter
        return True


@functools.lru_cache(maxsize=64)
def _headers(message_type: str, version: int) -> str:
    return headers_json(message_type, version)


def job_due_envelope(job: JobDue, *, at: datetime, source: str = SOURCE) -> Envelope:
    """A JobDue envelope as the ticker would publish it (tests and benchmarks use this)."""
    return wrap(
        job,
        id=job_due_event_id(job.run_id, job.attempt, job.redrive, job.rerun),
        key=job.job_id,
        source=source,
        occurred_at=at,
    )
