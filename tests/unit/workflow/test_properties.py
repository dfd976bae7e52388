"""Property: for generated workflows and event orders, replaying the produced history always gives
the same decisions (fresh runtime, any prefix the orchestrator decided at, any batching)."""

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotflow import workflow
from slotflow.contracts.workflows import (
    RUN_ENDING_EVENTS,
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    HistoryEvent,
    TimerCancelled,
    TimerStarted,
    WorkflowTimerFired,
)
from slotflow.workflow import ActivityError
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import T0, History


async def _act(name: str) -> Any:
    try:
        return await workflow.execute_activity(name, {"n": name})
    except ActivityError as failed:
        return f"failed {failed.error_type}"


@workflow.defn(name="prop.program")
class Program:
    """Interprets the program in its input, so one class stands for every generated workflow."""

    def __init__(self) -> None:
        self.pings = 0

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        for kind, arg in spec["steps"]:
            if kind == "act":
                out.append(await _act(arg))
            elif kind == "gather":
                out.append(await workflow.gather(*[_act(name) for name in arg]))
            elif kind == "sleep":
                await workflow.sleep(timedelta(seconds=arg))
                out.append("slept")
            elif kind == "signal":
                out.append(await workflow.wait_signal("go"))
            elif kind == "cond":

                def pinged(n: int = arg) -> bool:
                    return self.pings >= n

                try:
                    await workflow.wait_condition(pinged, timeout=timedelta(seconds=30))
                    out.append("pinged")
                except TimeoutError:
                    out.append("timeout")
            elif kind == "value":
                out.append([workflow.now().isoformat(), workflow.random(), str(workflow.uuid4())][arg])
            elif kind == "patch":
                out.append(workflow.patched(arg))
            elif kind == "task":
                task = workflow.create_task(_act(arg))
                await workflow.sleep(timedelta(seconds=1))
                out.append(await task)
        return out

    @workflow.signal
    def ping(self) -> None:
        self.pings += 1


NAMES = st.sampled_from(["a.one", "a.two", "a.three"])
STEP = st.one_of(
    st.tuples(st.just("act"), NAMES),
    st.tuples(st.just("gather"), st.lists(NAMES, min_size=1, max_size=3)),
    st.tuples(st.just("sleep"), st.integers(1, 3600)),
    st.tuples(st.just("signal"), st.none()),
    st.tuples(st.just("cond"), st.integers(1, 2)),
    st.tuples(st.just("value"), st.integers(0, 2)),
    st.tuples(st.just("patch"), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("task"), NAMES),
)


def _pending(events: list[HistoryEvent]) -> tuple[list[int], list[TimerStarted]]:
    activities: dict[int, None] = {}
    timers: dict[int, TimerStarted] = {}
    for event in events:
        if isinstance(event, ActivityScheduled):
            activities[event.sequence] = None
        elif isinstance(event, ActivityCompleted | ActivityFailed):
            activities.pop(event.scheduled_sequence, None)
        elif isinstance(event, TimerStarted):
            timers[event.sequence] = event
        elif isinstance(event, WorkflowTimerFired | TimerCancelled):
            timers.pop(event.started_sequence, None)
    return list(activities), list(timers.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, max_size=8), data=st.data())
def test_replay_reproduces_every_decision(steps: list[tuple[str, Any]], data: st.DataObject) -> None:
    cached = WorkflowRuntime([Program], cache_size=4)
    history = History(cached, "prop.program", {"steps": [list(s) for s in steps]})
    decided: list[tuple[int, Any, list[HistoryEvent]]] = []  # (history length before, now, events)

    def decide() -> None:
        before = len(history.events)
        events = list(history.replay().events)
        decided.append((before, history.now, events))

    decide()
    for _ in range(60):
        if isinstance(history.events[-1], RUN_ENDING_EVENTS):
            break
        activities, timers = _pending(history.events)
        choices: list[tuple[str, Any]] = [("act", s) for s in activities] + [
            ("timer", t.sequence) for t in timers
        ]
        choices += [("signal", "go"), ("signal", "ping"), ("cancel", "")]
        kind, what = data.draw(st.sampled_from(choices))
        if kind == "act":
            if data.draw(st.booleans()):
                history.complete(what, data.draw(st.integers(0, 9)))
            else:
                history.fail(what, "Declined")
        elif kind == "timer":
            history.fire(what)
        elif kind == "cancel":
            history.cancel()
        else:
            history.signal(what, {"at": len(history.events)} if what == "go" else {})
        if data.draw(st.booleans()) or len(choices) == 3:  # sometimes batch inputs before deciding
            decide()
    decide()

    fresh = WorkflowRuntime([Program])
    # The whole history replays with nothing new to decide and no mismatch.
    assert fresh.replay(history.events, now=T0 + timedelta(days=365)).events == []
    # Every decision, re-decided from scratch on the history as it was then, is the same.
    for before, now, events in decided:
        assert fresh.replay(history.events[:before], now=now).events == events
