"""workflow.patched / deprecate_patch: changed code replays old histories and takes the new path in new ones."""

from datetime import timedelta

import pytest

from slotflow import workflow
from slotflow.contracts.workflows import MarkerRecorded
from slotflow.workflow import NonDeterminismError, Replayer
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import T0, History, types


@workflow.defn(name="ship")
class V1:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("pay")
        await workflow.execute_activity("shipping.book")
        await workflow.sleep(timedelta(minutes=1))
        return "v1"


@workflow.defn(name="ship")
class V2:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("pay")
        if workflow.patched("express"):
            await workflow.execute_activity("shipping.book_express")
            await workflow.sleep(timedelta(minutes=1))
            return "v2"
        await workflow.execute_activity("shipping.book")
        await workflow.sleep(timedelta(minutes=1))
        return "v1"


@workflow.defn(name="ship")
class V3:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("pay")
        workflow.deprecate_patch("express")
        await workflow.execute_activity("shipping.book_express")
        await workflow.sleep(timedelta(minutes=1))
        return "v2"


@workflow.defn(name="ship")
class V4:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity("pay")
        await workflow.execute_activity("shipping.book_express")
        await workflow.sleep(timedelta(minutes=1))
        return "v2"


def _run(code: type[object], until_timer: bool = True) -> History:
    """pay, then the booking (after a marker where the code records one), then the sleep: left
    sleeping, or fired and finished."""
    history = History(WorkflowRuntime([code]), "ship")
    return history.drive(stop_at="workflow.timer_started" if until_timer else None)


def test_old_histories_take_the_old_path_new_runs_record_a_marker() -> None:
    old = _run(V1)  # in flight when V2 is deployed: sleeping after shipping.book
    v2 = WorkflowRuntime([V2])
    assert v2.replay(old.events, now=T0).events == []
    old.fire(6)
    (done,) = v2.replay(old.events, now=T0).events
    assert done.result == "v1"  # type: ignore[attr-defined]

    new = _run(V2, until_timer=False)
    marker = new.events[3]
    assert isinstance(marker, MarkerRecorded)
    assert (marker.kind, marker.patch_id, marker.deprecated) == ("patch", "express", False)
    assert new.events[-1].result == "v2"  # type: ignore[attr-defined]


def test_deprecate_patch_replays_patched_histories_and_records_a_deprecated_marker() -> None:
    patched = _run(V2, until_timer=False)
    assert Replayer([V3]).replay(patched.events).status == "completed"
    fresh = _run(V3, until_timer=False)
    marker = fresh.events[3]
    assert isinstance(marker, MarkerRecorded)
    assert marker.deprecated
    assert types(fresh.events)[4] == "activity_scheduled"


def test_removing_the_call_skips_deprecated_markers_but_not_live_ones() -> None:
    deprecated = _run(V3, until_timer=False)
    assert Replayer([V4]).replay(deprecated.events).status == "completed"
    live = _run(V2, until_timer=False)
    with pytest.raises(NonDeterminismError) as caught:
        Replayer([V4]).replay(live.events)
    assert (caught.value.sequence, caught.value.expected) == (4, "workflow.marker_recorded patch express")


def test_patched_is_stable_within_a_run() -> None:
    @workflow.defn(name="twice")
    class Twice:
        @workflow.run
        async def run(self) -> list[bool]:
            first = workflow.patched("p")
            await workflow.sleep(timedelta(seconds=1))
            return [first, workflow.patched("p")]

    history = History(WorkflowRuntime([Twice]), "twice")
    history.replay()
    history.fire(3)
    (done,) = history.replay().events
    assert done.result == [True, True]  # type: ignore[attr-defined]
    assert sum(isinstance(e, MarkerRecorded) for e in history.events) == 1
