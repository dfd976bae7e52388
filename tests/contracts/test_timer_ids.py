"""A timer's id follows from what it fires (slotflow.contracts.identity.timer_id_violation).

The ticker keeps the first StartTimer of an id. An id anyone may choose is one anyone may take
first: a StartTimer for `retry:<victim's run>#2` that fires nothing of the victim's, or a sleep's
id taken by a TimerFired for another workflow. Bound to its action, an id can only be taken by a
command firing that very action. Every form an issuer uses passes; each way of breaking the rule is
refused with its reason (docs/ticker.md, "Timer ids").
"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotflow.contracts import REGISTRY, CancelTimer, FireJobDue, FireTimerFired, JobDue, StartTimer, wrap
from slotflow.contracts.identity import cancel_timer_violation, check_identity, timer_id_violation
from slotflow.contracts.timers import (
    deadline_timer_id,
    execution_timer_id,
    resume_timer_id,
    retry_timer_id,
    sleep_timer_id,
)
from slotflow.core.identity import activity_run_id, run_id
from slotflow.errors import InvalidPayload

SLOT = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)
AT = SLOT + timedelta(minutes=5)
VICTIM = "payouts"
WF = "order-17"


def retry(**changes: Any) -> JobDue:
    values: dict[str, Any] = {
        "run_id": run_id(VICTIM, SLOT),
        "job_id": VICTIM,
        "slot": SLOT,
        "handler": "payouts.pay",
        "attempt": 2,
        "kind": "retry",
    }
    values.update(changes)
    return JobDue(**values)


ACTIVITY_RETRY = retry(
    run_id=activity_run_id(WF, 4),
    job_id=WF,
    workflow_id=WF,
    sequence=4,
    handler="payments.capture",
    attempt=3,
)


def timer(timer_id: str, action: FireJobDue | FireTimerFired) -> StartTimer:
    return StartTimer(timer_id=timer_id, fire_at=AT, on_fire=action)


GENUINE = {
    "a run's retry (claimer)": timer(retry_timer_id(run_id(VICTIM, SLOT), 2), FireJobDue(job=retry())),
    "a held run brought forward (claimer)": timer(resume_timer_id(run_id(VICTIM, SLOT), 2), FireJobDue(job=retry())),
    "an activity's retry (claimer)": timer(retry_timer_id(activity_run_id(WF, 4), 3), FireJobDue(job=ACTIVITY_RETRY)),
    "a sleep (workflow SDK)": timer(sleep_timer_id(WF, 5), FireTimerFired(owner=WF, sequence=5)),
    "an activity's deadline (orchestrator)": timer(
        deadline_timer_id(activity_run_id(WF, 4)), FireTimerFired(owner=WF, sequence=4)
    ),
    "an execution timeout (orchestrator)": timer(execution_timer_id(WF), FireTimerFired(owner=WF)),
    "a reused id's execution timeout": timer(execution_timer_id(WF, 12), FireTimerFired(owner=WF)),
}  # fmt: skip


@pytest.mark.parametrize("name", GENUINE)
def test_every_issuers_form_passes(name: str) -> None:
    started = GENUINE[name]
    assert timer_id_violation(started) is None
    assert cancel_timer_violation(started.timer_id) is None


def test_the_forms_are_the_ones_the_issuers_always_used() -> None:
    """Timers stored before this rule existed keep working: the ids did not change."""
    assert retry_timer_id("pay@x", 2) == "retry:pay@x#2"
    assert resume_timer_id("pay@x", 2) == "resume:pay@x#2"
    assert sleep_timer_id("wf", 8) == "wf/timer/8"
    assert deadline_timer_id("wf/4") == "wf/4#deadline"
    assert execution_timer_id("wf") == "wf#execution-timeout"
    assert execution_timer_id("wf", 4) == "wf#4/execution-timeout"


FORGED: dict[str, tuple[StartTimer, str]] = {
    # The finding: a JobDue of the attacker's choosing fired through the ticker.
    "any id, a whole JobDue": (timer("payday", FireJobDue(job=retry())), "does not fit its action"),
    "a first attempt, no schedule behind it": (
        timer(retry_timer_id(run_id(VICTIM, SLOT), 1), FireJobDue(job=retry(attempt=1, kind="scheduled"))),
        "not kind scheduled",
    ),
    "another run's retry id": (
        timer(retry_timer_id(run_id("other", SLOT), 2), FireJobDue(job=retry())),
        "does not fit its action",
    ),
    "another attempt's id": (
        timer(retry_timer_id(run_id(VICTIM, SLOT), 3), FireJobDue(job=retry())),
        "does not fit its action",
    ),
    "a JobDue under another job's run id": (
        timer(retry_timer_id(run_id(VICTIM, SLOT), 2), FireJobDue(job=retry(job_id="attacker"))),
        "is not what it says",
    ),
    # The finding: another workflow's sleep ended early.
    "another workflow's sleep id": (
        timer(sleep_timer_id("victim-wf", 5), FireTimerFired(owner=WF, sequence=5)),
        "does not fit its action",
    ),
    "a sleep fired for another sequence": (
        timer(sleep_timer_id(WF, 5), FireTimerFired(owner=WF, sequence=6)),
        "at sequence 6",
    ),
    "a deadline fired for another activity": (
        timer(deadline_timer_id(activity_run_id(WF, 4)), FireTimerFired(owner=WF, sequence=5)),
        "its activity's deadline",
    ),
    "a sleep id without a sequence": (
        timer(sleep_timer_id(WF, 5), FireTimerFired(owner=WF)),
        "execution timeout",
    ),
    "an execution timeout of another workflow": (
        timer(execution_timer_id("victim-wf"), FireTimerFired(owner=WF)),
        "execution timeout",
    ),
    "the first run's timeout spelled as a continued one": (
        timer(f"{WF}#1/execution-timeout", FireTimerFired(owner=WF)),
        "execution timeout",
    ),
    "a run start with a leading zero": (
        timer(f"{WF}#04/execution-timeout", FireTimerFired(owner=WF)),
        "execution timeout",
    ),
    "a run start in another script's digits": (
        timer(f"{WF}#\u0664/execution-timeout", FireTimerFired(owner=WF)),
        "execution timeout",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", FORGED)
def test_an_id_that_does_not_fit_its_action_is_refused_with_why(name: str) -> None:
    started, fragment = FORGED[name]
    envelope = wrap(started, id=f"cmd-{name}", key=started.timer_id, source="t", occurred_at=AT)
    with pytest.raises(InvalidPayload, match="forged or malformed identity") as caught:
        check_identity(envelope, REGISTRY.parse(envelope))
    assert fragment in str(caught.value)
    assert caught.value.reason == "invalid_payload"


@pytest.mark.parametrize(
    "timer_id", ["payday", "retry:", "retry:x#", "wf/timer/", "wf#deadline", "#execution-timeout", "x" * 900]
)
def test_a_cancel_of_an_id_no_issuer_starts_is_refused(timer_id: str) -> None:
    cancel = CancelTimer(timer_id=timer_id)
    envelope = wrap(cancel, id="cancel-1", key=timer_id, source="t", occurred_at=AT)
    with pytest.raises(InvalidPayload, match="is none an issuer starts"):
        check_identity(envelope, cancel)
