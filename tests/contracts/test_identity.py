"""The identity rule (slotflow.contracts.identity): ids follow from content, or the record is refused.

Issue 24: a JobDue naming `job_id: attacker` and `run_id: victim@<slot>` ran under the victim's
run id. Every golden example obeys the rule; each way of breaking it is refused with its reason.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotflow.contracts import REGISTRY, DeadLettered, Envelope, JobDue, RunStarted, WorkflowStarted, wrap
from slotflow.contracts.examples import EXAMPLES, example_envelope
from slotflow.contracts.identity import check_identity, identity_violation
from slotflow.core.identity import activity_run_id, job_due_event_id, run_id
from slotflow.errors import InvalidPayload

SLOT = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)


def due(**changes: Any) -> JobDue:
    values: dict[str, Any] = {
        "run_id": run_id("victim", SLOT),
        "job_id": "victim",
        "slot": SLOT,
        "handler": "h",
    }
    values.update(changes)
    return JobDue(**values)


def wrapped(job: JobDue, id: str | None = None) -> Envelope:
    return wrap(
        job,
        id=id if id is not None else job_due_event_id(job.run_id, job.attempt),
        key=job.job_id,
        source="t",
        occurred_at=SLOT,
    )


@pytest.mark.parametrize("model", sorted(EXAMPLES, key=lambda m: str(m.message_type)))  # type: ignore[attr-defined]
def test_every_golden_example_obeys_the_rule(model: type[Any]) -> None:
    envelope = example_envelope(model)
    check_identity(envelope, REGISTRY.parse(envelope))


GENUINE = {
    "scheduled": due(),
    "manual": due(kind="manual"),
    "backfill": due(kind="backfill"),
    "retry": due(kind="retry", attempt=3),
    "activity": due(run_id=activity_run_id("order-1", 4), job_id="order-1", kind="activity", workflow_id="order-1", sequence=4),
    "activity retry": due(
        run_id=activity_run_id("order-1", 4), job_id="order-1", kind="retry", attempt=2, workflow_id="order-1", sequence=4
    ),
    "microsecond slot": due(run_id=run_id("victim", SLOT + timedelta(microseconds=5)), slot=SLOT + timedelta(microseconds=5)),
}  # fmt: skip


@pytest.mark.parametrize("name", GENUINE)
def test_genuine_job_dues_pass(name: str) -> None:
    job = GENUINE[name]
    assert identity_violation(wrapped(job), job) is None


FORGED: dict[str, tuple[Envelope, str]] = {
    "another job's run id": (wrapped(due(job_id="attacker")), "is not 'attacker@2026-12-03T02:00:00Z'"),
    "another slot's run id": (wrapped(due(slot=SLOT + timedelta(hours=1))), "its job and slot"),
    "slot written another way": (wrapped(due(run_id="victim@2026-12-03T02:00:00+00:00")), "its job and slot"),
    "activity without a workflow": (wrapped(due(kind="activity")), "kind activity needs"),
    "workflow without a sequence": (wrapped(due(workflow_id="order-1")), "both workflow_id and sequence"),
    "activity under a scheduled kind": (
        wrapped(due(run_id="order-1/4", kind="scheduled", workflow_id="order-1", sequence=4)),
        "kind activity or retry",
    ),
    "activity with another's run id": (
        wrapped(due(run_id="order-2/4", kind="activity", workflow_id="order-1", sequence=4)),
        "is not 'order-1/4'",
    ),
    "retry at attempt 1": (wrapped(due(kind="retry")), "only a retry"),
    "attempt 2 not a retry": (wrapped(due(attempt=2)), "only a retry"),
    "envelope id of another run": (wrapped(due(), id=run_id("other", SLOT)), "run id, attempt and redrive"),
    "envelope id of another attempt": (wrapped(due(kind="retry", attempt=2), id=run_id("victim", SLOT)), "run id, attempt and redrive"),
    # A redrive's re-issue is a JobDue of its own: it cannot pass for the first one (whose id the
    # outbox and every inbox collapse on), nor the first for it.
    "redrive under the first one's id": (wrapped(due(redrive=2), id=run_id("victim", SLOT)), "run id, attempt and redrive"),
    "first one under a redrive's id": (wrapped(due(), id=f"{run_id('victim', SLOT)}/redrive/2"), "run id, attempt and redrive"),
    "NUL in the envelope id": (wrapped(due(), id="victim\x00@x"), "control character"),
}  # fmt: skip


@pytest.mark.parametrize("name", FORGED)
def test_forged_job_dues_are_refused_with_the_rule_they_break(name: str) -> None:
    envelope, fragment = FORGED[name]
    with pytest.raises(InvalidPayload, match="forged or malformed identity") as caught:
        check_identity(envelope, REGISTRY.parse(envelope))
    assert fragment in str(caught.value)
    assert caught.value.reason == "invalid_payload"


def test_run_events_history_events_and_letters_carry_their_own_ids() -> None:
    started = RunStarted(
        run_id="victim@x", job_id="victim", slot=SLOT, attempt=1, fence_token=3, owner="c", started_at=SLOT
    )
    ok = wrap(started, id="victim@x/3/started", key="victim", source="t", occurred_at=SLOT)
    assert identity_violation(ok, started) is None
    forged = wrap(started, id="other@x/3/started", key="victim", source="t", occurred_at=SLOT)
    assert "is not its run's" in (identity_violation(forged, started) or "")

    history = WorkflowStarted(workflow_id="wf", sequence=1, workflow_type="t", input={}, command_id="c")
    assert (
        identity_violation(wrap(history, id="wf#1", key="wf", source="t", occurred_at=SLOT), history) is None
    )
    assert identity_violation(wrap(history, id="wf#2", key="wf", source="t", occurred_at=SLOT), history)

    letter = DeadLettered(
        reason="r",
        error_type="E",
        error="e",
        source_service="s",
        topic="t",
        partition=1,
        offset=9,
        value_b64="",
    )
    assert identity_violation(wrap(letter, id="t:1:9", key="k", source="t", occurred_at=SLOT), letter) is None
    assert identity_violation(wrap(letter, id="t:1:8", key="k", source="t", occurred_at=SLOT), letter)


def test_schedule_ids_are_one_path_segment() -> None:
    """Issue 23: ids with `/` could be created but no schedule route could name them."""
    import pydantic

    from slotflow.contracts import CreateSchedule, CronSpec, ScheduleDefinition

    definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    with pytest.raises(pydantic.ValidationError, match="schedule_id"):
        CreateSchedule(schedule_id="team/a", definition=definition)
    CreateSchedule(schedule_id="team.a:b@c+d-e", definition=definition)


# -- an operator's re-runs ------------------------------------------------------------------------

FORCED = f"{run_id('victim', SLOT)}#rerun-2"


@pytest.mark.parametrize(
    ("job", "event_id"),
    [
        (due(kind="manual", rerun=1), f"{run_id('victim', SLOT)}/rerun/1"),
        (due(run_id=FORCED, kind="manual", rerun=2), f"{FORCED}/rerun/2"),
        (due(run_id=FORCED, kind="retry", attempt=2), f"{FORCED}#2"),
    ],
    ids=["re-run of the slot's run", "forced re-run", "a forced re-run's retry"],
)
def test_a_reruns_identity_follows_from_its_slot_and_number(job: JobDue, event_id: str) -> None:
    # Whether the ticker issued it is the claimer's check (ticker.rerun_issued); the shape is here.
    assert identity_violation(wrapped(job, event_id), job) is None


@pytest.mark.parametrize(
    ("job", "event_id", "said"),
    [
        (due(run_id=FORCED, kind="manual", rerun=3), f"{FORCED}/rerun/3", "carries re-run 3"),
        (due(run_id=f"{run_id('other', SLOT)}#rerun-2", kind="manual", rerun=2), None, "its job and slot"),
        (due(run_id=f"{run_id('victim', SLOT)}#rerun-02", kind="manual", rerun=2), None, "its job and slot"),
        (due(run_id=f"{run_id('victim', SLOT)}#rerun-0", kind="manual"), None, "its job and slot"),
        (due(kind="scheduled", rerun=1), f"{run_id('victim', SLOT)}/rerun/1", "kind manual"),
        (due(kind="manual", rerun=1), run_id("victim", SLOT), "envelope id"),
    ],
    ids=[
        "number differs",
        "another job",
        "leading zero",
        "number zero",
        "not manual",
        "id without its number",
    ],
)
def test_a_malformed_rerun_is_refused(job: JobDue, event_id: str | None, said: str) -> None:
    violation = identity_violation(
        wrapped(job, event_id or job_due_event_id(job.run_id, 1, 0, job.rerun)), job
    )
    assert violation is not None
    assert said in violation
