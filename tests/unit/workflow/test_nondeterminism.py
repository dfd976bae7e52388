"""Changed code against an old history: NonDeterminismError naming the sequence, the record, the code."""

from datetime import timedelta

import pytest

from slotflow import workflow
from slotflow.workflow import NonDeterminismError, Replayer
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import T0, History


@workflow.defn(name="flow")
class Original:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.first")
        await workflow.sleep(timedelta(minutes=5))
        await workflow.execute_activity("a.second")
        return "ok"


@workflow.defn(name="flow")
class Reordered:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.second")
        await workflow.sleep(timedelta(minutes=5))
        await workflow.execute_activity("a.first")
        return "ok"


@workflow.defn(name="flow")
class Renamed:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.first")
        await workflow.sleep(timedelta(minutes=5))
        await workflow.execute_activity("a.second_v2")
        return "ok"


@workflow.defn(name="flow")
class TimerRemoved:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.first")
        await workflow.execute_activity("a.second")
        return "ok"


@workflow.defn(name="flow")
class StepAdded:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.first")
        await workflow.execute_activity("a.audit")
        await workflow.sleep(timedelta(minutes=5))
        await workflow.execute_activity("a.second")
        return "ok"


@workflow.defn(name="flow")
class StopsEarly:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("a.first")
        await workflow.wait_condition(lambda: False)
        return "never"


def _recorded() -> History:
    """a.first at 2, completed; the timer at 4, fired; a.second at 6, completed; done at 8."""
    return History(WorkflowRuntime([Original]), "flow").drive()


def test_the_original_code_replays_its_history() -> None:
    result = Replayer([Original]).replay(_recorded().events)
    assert (result.status, result.events, result.next_events) == ("completed", 8, [])


@pytest.mark.parametrize(
    ("code", "sequence", "expected", "got"),
    [
        (Reordered, 2, "workflow.activity_scheduled activity a.first", "activity a.second"),
        (Renamed, 6, "workflow.activity_scheduled activity a.second", "activity a.second_v2"),
        (TimerRemoved, 4, "workflow.timer_started timer", "activity a.second"),
        (StepAdded, 4, "workflow.timer_started timer", "activity a.audit"),
        (StopsEarly, 4, "workflow.timer_started timer", "nothing (the code is waiting)"),
    ],
    ids=["reordered", "renamed-activity", "removed-timer", "added-step", "stops-early"],
)
def test_changed_code_is_caught_at_the_sequence_it_parts(
    code: type[object], sequence: int, expected: str, got: str
) -> None:
    events = _recorded().events
    with pytest.raises(NonDeterminismError) as caught:
        WorkflowRuntime([code]).replay(events, now=T0)
    error = caught.value
    assert (error.workflow_id, error.sequence, error.expected, error.got) == ("wf-1", sequence, expected, got)
    assert f"at history sequence {sequence}" in str(error)
    # The replayer reports the same mismatch.
    with pytest.raises(NonDeterminismError, match=f"sequence {sequence}"):
        Replayer([code]).replay(events)


def test_a_removed_timer_at_the_end_of_a_history_is_caught() -> None:
    # The timer at 4 is the last event.
    history = History(WorkflowRuntime([Original]), "flow").drive(stop_at="workflow.timer_started")
    with pytest.raises(NonDeterminismError) as caught:
        WorkflowRuntime([TimerRemoved]).replay(history.events, now=T0)
    assert (caught.value.sequence, caught.value.got) == (4, "activity a.second")


def test_a_decision_the_code_swallows_still_fails_the_step() -> None:
    @workflow.defn(name="flow")
    class Swallows:
        @workflow.run
        async def run(self) -> str:
            try:
                await workflow.execute_activity("a.other")
            except NonDeterminismError:
                return "hid it"
            return "ok"

    with pytest.raises(NonDeterminismError, match=r"a\.other"):
        WorkflowRuntime([Swallows]).replay(_recorded().events, now=T0)


def test_the_stuck_workflow_resumes_when_matching_code_is_deployed() -> None:
    from slotflow.contracts.workflows import NonDeterminismDetected

    history = _recorded()
    history.events = history.events[:6]  # a.second scheduled at 6, its result not back yet
    with pytest.raises(NonDeterminismError) as caught:
        WorkflowRuntime([Renamed]).replay(history.events, now=T0)
    error = caught.value
    history.add(NonDeterminismDetected, at_sequence=error.sequence, expected=error.expected, got=error.got)
    assert error.sequence == 6
    # Code that matches again skips the marker and carries on.
    fixed = WorkflowRuntime([Original])
    assert fixed.replay(history.events, now=T0).events == []
    history.complete(6)
    (done,) = fixed.replay(history.events, now=T0).events
    assert done.result == "ok"  # type: ignore[attr-defined]
