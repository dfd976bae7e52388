"""The projection table: each message type is projected by one entry, found by its type."""

from slotflow.contracts import DeadLettered, JobDue, RunCompleted, RunStarted, ScheduleCreated, TimerFired
from slotflow_api.projection import PROJECTIONS, _projection


def test_each_type_finds_its_projection_and_a_later_version_its_bases() -> None:
    assert _projection(JobDue) is PROJECTIONS[JobDue]
    assert _projection(RunStarted) is _projection(RunCompleted)
    assert _projection(ScheduleCreated) is PROJECTIONS[ScheduleCreated]
    assert _projection(TimerFired) is PROJECTIONS[TimerFired]

    class JobDueV2(JobDue):
        message_version = 2

    assert _projection(JobDueV2) is PROJECTIONS[JobDue]


def test_a_type_the_read_model_does_not_project_has_no_entry() -> None:
    # The DLQ's own view comes from DeadLetterStatusChanged, not from the letters themselves.
    assert _projection(DeadLettered) is None
