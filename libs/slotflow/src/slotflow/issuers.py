"""Another service's event is acted on only as far as its issuer's own record backs it.

Kafka's ACLs decide who may write a topic; they do not make what is written true. A principal
that may write the runs or timers topic (a leaked credential, a misconfigured client, a bug) can
put any outcome or firing there, and what would identify a genuine one (a run's fence token and
attempt, a history sequence) are small integers anyone can guess. So a consumer that changes
durable state because another service says something happened checks the claim against a record
the claim cannot forge: the issuer's own row, in the same database, committed in the very
transaction that staged the event in the issuer's outbox (so by the time the event is on Kafka
the row is there), or the consumer's own record of what it asked for.

The rules, pure (the consumer reads the records, in one statement per batch, and acts):

- `outcome_verdict`: an activity's RunCompleted or RunDeadLettered counts only when its run id is
  the pending activity's `{workflow_id}/{sequence}`, and the claimer's row for that run exists, is
  in the terminal state the event claims, carries the event's fence token and attempt, and ran the
  activity's handler. What the consumer then records is the row's (`RunRecord.result`,
  `RunRecord.failure`), never the event's: matching guessable integers proves little, the row
  proves the rest.
- `timer_verdict`: a TimerFired counts only for a timer the consumer itself started and still
  waits on (the id it recorded when it started it), and not before that timer's `fire_at` by the
  database clock.
- `cancel_verdict`: a CancelActivity counts only when the orchestrator recorded that very cancel
  (its `activity_cancel_issued`, a row written in the decision that staged it), and the claimer's
  row for the run, if it has one, is that workflow's activity at that sequence with that handler:
  a cancel never stops a schedule's run or another workflow's.

A refusal is a `Verdict` naming the DLQ reason (`unproven_outcome`, `unproven_timer`, `unproven_cancel`), the rule
broken (a fixed set, fit for a metric label) and a sentence for an operator; the consumer parks the
record with `Verdict.error()` and leaves its own state untouched. What each consumer checks of
each record it acts on, and who could have written it: docs/security.md, "What each consumer
believes".
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from slotflow.contracts import CancelActivity, RunCompleted, RunDeadLettered
from slotflow.errors import UnprovenCancel, UnprovenOutcome, UnprovenRecord, UnprovenTimer

#: Which rule a refused event broke (a metric label: keep the set fixed).
Rule = Literal[
    "run_id",
    "no_record",
    "fence",
    "attempt",
    "state",
    "handler",
    "timer_id",
    "not_started",
    "early",
    "not_issued",
    "not_activity",
]

UNPROVEN_OUTCOME = UnprovenOutcome.reason
UNPROVEN_TIMER = UnprovenTimer.reason
UNPROVEN_CANCEL = UnprovenCancel.reason

#: The claimer's row state each outcome event claims (`claimer.runs.state`).
_CLAIMED_STATE = {RunCompleted.message_type: "completed", RunDeadLettered.message_type: "dead_lettered"}
#: How much of an id a refusal quotes.
_SHOWN = 200


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an event may be acted on; when refused, why (see the module docstring)."""

    #: The DLQ reason of a refusal; None when the event may be acted on.
    reason: str | None = None
    rule: Rule | None = None
    #: A sentence an operator understands, naming the record and what did not match.
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.reason is None

    def error(self) -> UnprovenRecord:
        """The error the consumer parks the refused record with (its reason and detail)."""
        kinds: dict[str | None, type[UnprovenRecord]] = {
            UNPROVEN_TIMER: UnprovenTimer,
            UNPROVEN_CANCEL: UnprovenCancel,
        }
        return kinds.get(self.reason, UnprovenOutcome)(self.detail)


ACCEPTED = Verdict()


def _refused(reason: str, rule: Rule, detail: str) -> Verdict:
    return Verdict(reason, rule, detail)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What the claimer recorded of a run: its `runs` row (the columns a verdict reads).

    ``result`` is the completed run's result as the claimer recorded it, which for a workflow
    activity's result too large to travel inline is a payload reference into the claimer's
    payload table (`slotflow.contracts.workflows.is_payload_ref`); the consumer resolves it there.
    ``error`` is the dead-lettered run's last error (`error_type`, `message`, `reason`).
    """

    run_id: str
    state: str
    fence_token: int
    attempt: int
    handler: str
    result: Any = None
    error: Mapping[str, Any] | None = None
    #: The run's redrive number so far: a retry of a parked activity re-issues it with the next.
    redrive_count: int = 0

    def failure(self) -> tuple[Literal["permanent_error", "attempts_exhausted"], str, str]:
        """The dead-lettered run's (reason, error type, message), as the claimer recorded them;
        the reason as RunDeadLettered names it (an unknown handler is a permanent error)."""
        error = self.error or {}
        reason: Literal["permanent_error", "attempts_exhausted"] = (
            "attempts_exhausted" if error.get("reason") == "attempts_exhausted" else "permanent_error"
        )
        error_type = error.get("error_type")
        message = error.get("message")
        return (
            reason,
            error_type if isinstance(error_type, str) and error_type else reason,
            message if isinstance(message, str) else "",
        )


def outcome_verdict(
    outcome: RunCompleted | RunDeadLettered, *, run_id: str, handler: str, record: RunRecord | None
) -> Verdict:
    """May ``outcome`` answer the pending activity whose run id is ``run_id`` and whose handler is
    ``handler``? ``record`` is the claimer's row for ``run_id`` (None: it holds none)."""
    if outcome.run_id != run_id:
        return _refused(
            UNPROVEN_OUTCOME,
            "run_id",
            f"{outcome.message_type} names run {_shown(outcome.run_id)}, but the activity pending at "
            f"{_shown(str(outcome.workflow_id))} sequence {outcome.sequence} is run {_shown(run_id)}",
        )
    if record is None:
        return _refused(
            UNPROVEN_OUTCOME,
            "no_record",
            f"the claimer holds no record of run {_shown(run_id)} (never claimed, or purged after its "
            f"retention): {outcome.message_type} with fence {outcome.fence_token}, attempt "
            f"{outcome.attempt} is not backed",
        )
    claimed = _CLAIMED_STATE[outcome.message_type]
    differences: list[tuple[Rule, str]] = []
    if outcome.fence_token != record.fence_token:
        differences.append(("fence", f"fence {outcome.fence_token}, recorded {record.fence_token}"))
    if outcome.attempt != record.attempt:
        differences.append(("attempt", f"attempt {outcome.attempt}, recorded {record.attempt}"))
    if record.state != claimed:
        differences.append(("state", f"{claimed}, recorded {record.state}"))
    if record.handler != handler:
        differences.append(
            ("handler", f"the claimer ran {_shown(record.handler)}, the activity is {_shown(handler)}")
        )
    if differences:
        return _refused(
            UNPROVEN_OUTCOME,
            differences[0][0],
            f"{outcome.message_type} does not match the claimer's record of run {_shown(run_id)}: "
            + "; ".join(text for _, text in differences),
        )
    return ACCEPTED


def timer_verdict(
    timer_id: str, *, awaited: str, awaited_id: str | None, fire_at: datetime | None, clock: datetime
) -> Verdict:
    """May the firing of ``timer_id`` end what the consumer waits on?

    ``awaited`` says what waits, for the reason (`the sleep at sequence 5 of order-1`);
    ``awaited_id`` is the timer id the consumer recorded when it started that timer, and
    ``fire_at`` when it is due (None for either: it started no timer for it); ``clock`` is the
    database's clock, read after the firing was recorded (a genuine firing is never early by it).
    """
    if awaited_id is None or fire_at is None:
        return _refused(
            UNPROVEN_TIMER,
            "not_started",
            f"TimerFired {_shown(timer_id)}: {awaited} started no such timer",
        )
    if timer_id != awaited_id:
        return _refused(
            UNPROVEN_TIMER,
            "timer_id",
            f"TimerFired {_shown(timer_id)} is not the timer {awaited} waits on ({_shown(awaited_id)})",
        )
    if clock < fire_at:
        return _refused(
            UNPROVEN_TIMER,
            "early",
            f"TimerFired {_shown(timer_id)} before its time: {awaited} is due at {fire_at.isoformat()}, "
            f"the database clock says {clock.isoformat()}",
        )
    return ACCEPTED


@dataclass(frozen=True, slots=True)
class CancelTarget:
    """What the claimer recorded of the run a cancel request names: its `runs` row's identity."""

    run_id: str
    kind: str
    workflow_id: str | None
    sequence: int | None
    handler: str
    state: str


def cancel_verdict(cancel: CancelActivity, *, issued: bool, record: CancelTarget | None) -> Verdict:
    """May ``cancel`` stop the run it names?

    ``issued`` is the orchestrator's answer (`activity_cancel_issued`: it recorded this cancel of
    that workflow's activity at that sequence, in the decision that staged it); ``record`` is the
    claimer's row for the run (None: it holds none yet, and the run then never starts). The run id
    is the workflow's activity at the sequence already (the identity rule, on decode).
    """
    name = f"CancelActivity of run {_shown(cancel.run_id)}"
    if not issued:
        return _refused(
            UNPROVEN_CANCEL,
            "not_issued",
            f"{name}: the orchestrator recorded no cancel of activity {cancel.sequence} of workflow "
            f"{_shown(cancel.workflow_id)}",
        )
    if record is None:
        return ACCEPTED
    if (
        record.kind != "activity"
        or record.workflow_id != cancel.workflow_id
        or record.sequence != cancel.sequence
    ):
        return _refused(
            UNPROVEN_CANCEL,
            "not_activity",
            f"{name}: the claimer's run {_shown(record.run_id)} is a {record.kind} run"
            + (f" of workflow {_shown(record.workflow_id)}" if record.workflow_id is not None else "")
            + f", not activity {cancel.sequence} of workflow {_shown(cancel.workflow_id)}",
        )
    if record.handler != cancel.handler:
        return _refused(
            UNPROVEN_CANCEL,
            "handler",
            f"{name}: the claimer runs {_shown(record.handler)}, the cancel names {_shown(cancel.handler)}",
        )
    return ACCEPTED
