"""A zero-length sleep: recorded like any timer, fired by the decision that started it.

The real workflow runtime steps the code here (pure, no I/O), so the history these decisions
append is what a later replay must accept.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

from slotflow import workflow
from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    Envelope,
    HistoryEvent,
    Message,
    RunCompleted,
    StartTimer,
    StartWorkflow,
    TimerStarted,
    WorkflowCompleted,
    WorkflowStarted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.issuers import RunRecord
from slotflow.pg.outbox import Staged
from slotflow.settings import KafkaSettings
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.stepping import MAX_DUE_TIMERS_PER_DECISION, Input, Row, Step, step
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
WF = "wf-1"


@workflow.defn(name="test.zero_sleep")
class ZeroSleep:
    @workflow.run
    async def run(self, data: dict[str, Any]) -> str:
        await workflow.execute_activity("a", data)
        await workflow.sleep(timedelta(0))
        await workflow.execute_activity("b", data)
        return "done"


@workflow.defn(name="test.short_sleep")
class ShortSleep:
    @workflow.run
    async def run(self, data: dict[str, Any]) -> str:
        await workflow.sleep(timedelta(milliseconds=1))
        return "done"


@workflow.defn(name="test.zero_sleeps")
class ZeroSleeps:
    @workflow.run
    async def run(self, data: dict[str, Any]) -> str:
        while True:
            await workflow.sleep(0)


def item(message: Message, id: str, seq: int) -> Input:
    envelope: Envelope = wrap(message, id=id, key=WF, source="test", occurred_at=NOW)
    return Input(seq, envelope, message)


def workflow_code(cache: int = 100) -> RuntimeWorkflowCode:
    return RuntimeWorkflowCode(WorkflowRuntime([ZeroSleep, ShortSleep, ZeroSleeps], cache_size=cache))


def start(workflow_type: str) -> Input:
    return item(StartWorkflow(workflow_id=WF, workflow_type=workflow_type, input={}), "c1", 1)


def completed(sequence: int, seq: int) -> Input:
    done = RunCompleted(
        run_id=f"{WF}/{sequence}",
        job_id=WF,
        slot=NOW,
        attempt=1,
        fence_token=1,
        owner="c",
        workflow_id=WF,
        sequence=sequence,
        result=None,
        started_at=NOW,
        finished_at=NOW,
    )
    return item(done, f"r{sequence}", seq)


#: The claimer's records of the two activities' runs, completed as `completed` says.
RECORDS = {
    f"{WF}/2": RunRecord(f"{WF}/2", "completed", fence_token=1, attempt=1, handler="a"),
    f"{WF}/6": RunRecord(f"{WF}/6", "completed", fence_token=1, attempt=1, handler="b"),
}


def timer_starts(out: Step) -> list[StartTimer]:
    rows = Outbound(KafkaSettings()).rows(out, out.events, now=NOW)
    return [
        StartTimer.model_validate(r.envelope.data)
        for r in rows
        if isinstance(r, Staged) and r.envelope.type == StartTimer.message_type
    ]


def test_a_zero_sleep_fires_in_its_own_decision_and_the_code_moves_on() -> None:
    runtime = workflow_code()
    first = step(WF, None, [], [start("test.zero_sleep")], workflow_code=runtime, now=NOW)
    history: list[HistoryEvent] = list(first.events)
    assert [type(e) for e in history] == [WorkflowStarted, ActivityScheduled]
    second = step(
        WF,
        Row("test.zero_sleep", "running"),
        history,
        [completed(2, 2)],
        workflow_code=runtime,
        now=NOW,
        records=RECORDS,
    )
    assert [type(e) for e in second.events] == [
        ActivityCompleted,
        TimerStarted,
        WorkflowTimerFired,
        ActivityScheduled,
    ]
    fired = second.events[2]
    assert isinstance(fired, WorkflowTimerFired)
    assert (fired.started_sequence, fired.fired_at) == (4, NOW)
    assert second.fired_here == {4}
    # The ticker is never asked for it; the next activity's JobDue is staged as usual.
    assert timer_starts(second) == []
    history += second.events
    third = step(
        WF,
        Row("test.zero_sleep", "running"),
        history,
        [completed(6, 3)],
        workflow_code=runtime,
        now=NOW,
        records=RECORDS,
    )
    assert [type(e) for e in third.events] == [ActivityCompleted, WorkflowCompleted]
    assert third.status == "completed"


def test_the_history_a_zero_sleep_leaves_replays_without_the_cache() -> None:
    runtime = workflow_code()
    history: list[HistoryEvent] = []
    inputs = [start("test.zero_sleep"), completed(2, 2), completed(6, 3)]
    for index, waiting in enumerate(inputs):
        row = Row("test.zero_sleep", "running") if index else None
        history += step(WF, row, history, [waiting], workflow_code=runtime, now=NOW, records=RECORDS).events
    # A fresh runtime (another orchestrator after a crash) makes the same moves after each input,
    # and accepts the whole history (a replay with a later clock diverges nowhere).
    inputs_at = [
        i
        for i, e in enumerate(history)
        if isinstance(e, WorkflowStarted | ActivityCompleted | WorkflowTimerFired)
    ]
    for index in inputs_at:
        replayed = workflow_code(cache=0).runtime.replay(history[: index + 1], now=NOW)
        assert replayed.events
        assert list(replayed.events) == history[index + 1 : index + 1 + len(replayed.events)]
    whole = workflow_code(cache=0).runtime.replay(history, now=NOW + timedelta(hours=1))
    assert whole.closed
    assert not whole.events


def test_a_timer_that_is_not_due_goes_to_the_ticker() -> None:
    out = step(WF, None, [], [start("test.short_sleep")], workflow_code=workflow_code(), now=NOW)
    assert [type(e) for e in out.events] == [WorkflowStarted, TimerStarted]
    assert out.fired_here == set()
    [started] = timer_starts(out)
    assert started.fire_at == NOW + timedelta(milliseconds=1)


def test_a_loop_of_zero_sleeps_hands_the_rest_to_the_ticker() -> None:
    out = step(WF, None, [], [start("test.zero_sleeps")], workflow_code=workflow_code(), now=NOW)
    fired = [e for e in out.events if isinstance(e, WorkflowTimerFired)]
    started = [e for e in out.events if isinstance(e, TimerStarted)]
    assert len(fired) == MAX_DUE_TIMERS_PER_DECISION
    assert len(started) == MAX_DUE_TIMERS_PER_DECISION + 1
    [left] = timer_starts(out)
    assert left.timer_id == started[-1].timer_id
