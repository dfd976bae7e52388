"""The runtime on recorded histories: results handed back, decisions matched, new ones recorded."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts.codec import FIELD_MAX_DEPTH
from slotflow.contracts.workflows import (
    ActivityScheduled,
    CompensationRegistered,
    MarkerRecorded,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
)
from slotflow.workflow._execution import SIGNAL_FAILURE_COMPENSATES
from slotflow.workflow.commands import CancelTimer, ScheduleActivity, StartTimer
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import T0, History, types
from tests.unit.workflow.workflows import Approval, Checkout, Deadline, Fanout, Order, Recorded

RUNTIME = WorkflowRuntime([Checkout, Approval, Deadline, Recorded, Fanout])


def _checkout_to_capture(history: History) -> None:
    history.replay()  # authorize at 2
    history.complete(2, {"auth": "A1"})
    history.replay()  # compensation at 4, reserve at 5
    history.complete(5, {"hold": "H1"})
    history.replay()  # compensation at 7, timer at 8
    history.fire(8)
    history.replay()  # capture at 10


def test_happy_path_records_each_step_once_and_completes() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 17})
    first = history.replay()
    assert types(first.events) == ["activity_scheduled"]
    (command,) = first.commands
    assert isinstance(command, ScheduleActivity)
    assert (command.run_id, command.activity, command.payload) == (
        "wf-1/2",
        "payments.authorize",
        {"order_id": 17, "amount": "10.00"},
    )
    assert command.retry.max_attempts == 5
    assert command.retry.start_to_close == timedelta(seconds=30)
    history.complete(2, {"auth": "A1"})
    second = history.replay()
    assert types(second.events) == ["compensation_registered", "activity_scheduled"]
    history.complete(5, {"hold": "H1"})
    third = history.replay()
    assert types(third.events) == ["compensation_registered", "timer_started"]
    timer = third.events[1]
    assert isinstance(timer, TimerStarted)
    assert timer.fire_at == T0 + timedelta(hours=24)
    assert third.commands == [StartTimer("wf-1", 8, "wf-1/timer/8", T0 + timedelta(hours=24))]
    history.fire(8)
    fourth = history.replay()
    capture = fourth.events[0]
    assert isinstance(capture, ActivityScheduled)
    assert capture.retry.non_retryable == ("CardDeclined",)
    history.complete(10, {"id": "C9"})
    last = history.replay()
    assert last.closed
    assert last.commands == []
    (done,) = last.events
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"order_id": 17, "capture": "C9"}
    # Replaying the finished history decides nothing more.
    assert RUNTIME.replay(history.events, now=T0).events == []


def test_retries_are_one_result_and_replay_hands_back_recorded_results() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 1})
    history.replay()
    # The claimer retried the authorization three times: history holds only its one outcome.
    history.complete(2, {"auth": "A1"})
    replayed = RUNTIME.replay(history.events, now=T0)
    again = RUNTIME.replay(history.events, now=T0 + timedelta(days=9))
    assert replayed == again  # pure: the same history gives the same decision; `now` only for new timers
    assert [c.activity for c in replayed.commands if isinstance(c, ScheduleActivity)] == ["inventory.reserve"]


def test_a_permanent_failure_compensates_in_reverse_order() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 1})
    _checkout_to_capture(history)
    history.fail(10, "CardDeclined")
    release = history.replay()
    assert [(e.activity, e.compensates) for e in release.events] == [("inventory.release", 5)]  # type: ignore[attr-defined]
    history.complete(12)
    void = history.replay()
    assert [(e.activity, e.compensates) for e in void.events] == [("payments.void", 2)]  # type: ignore[attr-defined]
    history.complete(14)
    end = history.replay()
    (failed,) = end.events
    assert isinstance(failed, WorkflowFailed)
    assert (failed.error_type, failed.compensated) == ("CardDeclined", True)


def test_a_crash_mid_compensation_resumes_without_running_anything_twice() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 1})
    _checkout_to_capture(history)
    history.fail(10, "CardDeclined")
    history.replay()
    history.complete(12)  # release done; the orchestrator crashes before deciding again
    fresh = WorkflowRuntime([Checkout])  # a new process, nothing cached
    resumed = fresh.replay(history.events, now=T0)
    scheduled = [c for c in resumed.commands if isinstance(c, ScheduleActivity)]
    assert [(c.activity, c.compensates) for c in scheduled] == [("payments.void", 2)]


def test_cancel_raises_at_the_await_and_the_code_compensates() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 1})
    history.replay()
    history.complete(2, {"auth": "A1"})
    history.replay()
    history.complete(5, {"hold": "H1"})
    history.replay()  # sleeping on the timer at 8
    history.cancel()
    cancelled = history.replay()
    assert types(cancelled.events) == ["timer_cancelled", "activity_scheduled"]
    assert cancelled.commands[0] == CancelTimer("wf-1", "wf-1/timer/8", 8)
    history.complete(11)
    history.replay()
    history.complete(13)
    end = history.replay()
    (event,) = end.events
    assert isinstance(event, WorkflowCancelled)
    assert event.compensated
    assert event.reason == "customer cancelled"
    # A late firing of the cancelled timer changes nothing on replay.
    assert RUNTIME.replay(history.events, now=T0).events == []


def test_signals_before_and_after_the_code_waits() -> None:
    early = History(RUNTIME, "signals.approval")
    early.signal("note", {"text": "early"})  # arrives before the code waits for it: buffered
    assert early.replay().events == []
    early.signal("approve", {"who": "ann"})
    (done,) = early.replay().events
    assert done.result == {"by": "ann", "note": {"text": "early"}}  # type: ignore[attr-defined]

    late = History(RUNTIME, "signals.approval")
    assert late.replay().events == []
    late.signal("approve", {"who": "bob"})
    assert late.replay().events == []  # now waiting for the note
    late.signal("note", {"text": "late"})
    (done,) = late.replay().events
    assert done.result == {"by": "bob", "note": {"text": "late"}}  # type: ignore[attr-defined]


def test_batched_inputs_decide_as_one_at_a_time() -> None:
    one = History(RUNTIME, "signals.approval")
    one.replay()
    one.signal("approve", {"who": "ann"})
    one.replay()
    one.signal("note", {"text": "x"})
    one.replay()
    both = History(RUNTIME, "signals.approval")
    both.replay()
    both.signal("approve", {"who": "ann"})
    both.signal("note", {"text": "x"})
    both.replay()
    assert one.events == both.events


def test_wait_condition_timeout_fires_or_is_cancelled() -> None:
    slow = History(RUNTIME, "timers.deadline")
    (timer,) = slow.replay().events
    slow.fire(timer.sequence)
    (done,) = slow.replay().events
    assert done.result == "timed out"  # type: ignore[attr-defined]

    quick = History(RUNTIME, "timers.deadline")
    quick.replay()
    quick.signal("finish")
    decision = quick.replay()
    assert types(decision.events) == ["timer_cancelled", "completed"]
    assert decision.events[1].result == "done"  # type: ignore[attr-defined]


def test_now_random_and_uuid_are_recorded_once_and_replayed() -> None:
    history = History(RUNTIME, "values.recorded")
    decision = history.replay()
    markers = [e for e in decision.events if isinstance(e, MarkerRecorded)]
    assert [m.kind for m in markers] == ["now", "random", "uuid"]
    assert markers[0].value == T0.isoformat()
    result = decision.events[-1].result  # type: ignore[attr-defined]
    assert result["at"] == T0.isoformat()
    assert 0 <= result["random"] < 1
    assert result["length"] == 4
    # The history ends in the completion: replaying it later (another clock) finds the same values.
    assert RUNTIME.replay(history.events, now=T0 + timedelta(days=1)).events == []
    assert RUNTIME.replay(history.events[:1], now=T0).events == decision.events


def test_gather_runs_activities_concurrently() -> None:
    history = History(RUNTIME, "parallel.fanout", {"items": [1, 2, 3]})
    scheduled = history.replay()
    assert [e.sequence for e in scheduled.events] == [2, 3, 4]
    history.complete(4, 30)
    history.complete(2, 10)
    assert history.replay().events == []
    history.complete(3, 20)
    (done,) = history.replay().events
    assert done.result == [10, 20, 30]  # type: ignore[attr-defined]


def test_compensation_registered_names_the_forward_step() -> None:
    history = History(RUNTIME, "orders.checkout", {"order_id": 1})
    history.replay()
    history.complete(2, {"auth": "A1"})
    registered = history.replay().events[0]
    assert isinstance(registered, CompensationRegistered)
    assert (registered.for_step, registered.activity, registered.payload) == (
        2,
        "payments.void",
        {"auth": "A1"},
    )


@pytest.mark.parametrize("cache_size", [0, 8])
def test_cached_executions_decide_exactly_like_fresh_replays(cache_size: int) -> None:
    cached = WorkflowRuntime([Checkout], cache_size=cache_size)
    history = History(cached, "orders.checkout", {"order_id": 3})
    fresh = WorkflowRuntime([Checkout])
    outcomes = [history.replay()]
    steps: list[Callable[[], None]] = [
        lambda: history.complete(2, {"auth": "A"}),
        lambda: history.complete(5, {"hold": "H"}),
        lambda: history.fire(8),
        lambda: history.fail(10, "CardDeclined"),
        lambda: history.complete(12),
        lambda: history.complete(14),
    ]
    for step in steps:
        step()
        expected = fresh.replay(history.events, now=history.now)
        got = history.replay()
        assert got == expected
        outcomes.append(got)
    assert outcomes[-1].closed


@workflow.defn(name="signals.broken")
class BrokenHandler:
    def __init__(self) -> None:
        self.items: list[int] = []

    @workflow.run
    async def run(self) -> str:
        # False at first; a 0 signalled in makes the predicate itself raise.
        await workflow.wait_condition(lambda: bool(self.items) and 1 / self.items[-1] > 5)
        return "never"

    @workflow.signal
    def add(self, payload: dict[str, int]) -> None:
        self.items.append(payload["n"])


def test_a_failing_signal_handler_or_condition_fails_the_run_not_the_step() -> None:
    runtime = WorkflowRuntime([BrokenHandler])
    condition = History(runtime, "signals.broken")
    assert condition.replay().events == []
    condition.signal("add", {"n": 0})
    (failed,) = condition.replay().events
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == "ZeroDivisionError"


@workflow.defn(name="signals.typed")
class TypedHandler:
    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: False)
        return "never"

    @workflow.signal
    def add(self, payload: Order) -> None:
        pass


def test_a_signal_payload_that_does_not_validate_fails_the_run() -> None:
    # The orchestrator refuses such a signal at intake; one recorded before that (or under another
    # version of the handler) fails the run when the handler cannot take it, after the marker that
    # says the body was cancelled first (tests/unit/workflow/test_signal_failures.py).
    history = History(WorkflowRuntime([TypedHandler]), "signals.typed")
    history.replay()
    history.signal("add", {"order_id": "not a number"})
    marker, failed = history.replay().events
    assert isinstance(marker, MarkerRecorded)
    assert marker.patch_id == SIGNAL_FAILURE_COMPENSATES
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == "ValidationError"


@workflow.defn(name="exits.everywhere")
class ExitsEverywhere:
    """`sys.exit` from the body, a signal handler or a wait_condition predicate, as asked."""

    def __init__(self) -> None:
        self.where = ""

    @workflow.run
    async def run(self, order: dict[str, str]) -> str:
        if order["where"] == "body":
            raise SystemExit("the body gave up")
        await workflow.wait_condition(self._ready)
        return "never"

    def _ready(self) -> bool:
        if self.where == "predicate":
            raise KeyboardInterrupt
        return False

    @workflow.signal
    def go(self, payload: dict[str, str]) -> None:
        if payload["where"] == "handler":
            raise SystemExit("the signal handler gave up")
        self.where = payload["where"]


@pytest.mark.parametrize(
    ("where", "error_type"),
    [("body", "SystemExit"), ("handler", "SystemExit"), ("predicate", "KeyboardInterrupt")],
)
def test_system_exit_anywhere_in_workflow_code_fails_the_run_not_the_decider(
    where: str, error_type: str
) -> None:
    # Issue 20: it escaped `replay` (then `decide`) and ended the orchestrator's process.
    history = History(WorkflowRuntime([ExitsEverywhere]), "exits.everywhere", {"where": where})
    outcome = history.replay()
    if where != "body":
        assert outcome.events == []
        history.signal("go", {"where": where})
        outcome = history.replay()
    # A handler's failure cancels the body first (the patch marker says so), the others end it.
    *marker, failed = outcome.events
    assert [m.patch_id for m in marker if isinstance(m, MarkerRecorded)] == (
        [SIGNAL_FAILURE_COMPENSATES] if where == "handler" else []
    )
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == error_type


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


@workflow.defn(name="deep.data")
class DeepData:
    """Hands an activity, or returns, data nested deeper than any consumer decodes."""

    @workflow.run
    async def run(self, order: dict[str, str]) -> dict[str, Any]:
        if order["where"] == "activity":
            await workflow.execute_activity("payments.authorize", _nested(150))
        return _nested(150)


@pytest.mark.parametrize("where", ["activity", "result"])
def test_data_nested_past_the_shared_limit_fails_the_run_at_the_call(where: str) -> None:
    # Issue 20, one depth limit for every service: the JobDue (or the history event) carrying it
    # would have been parked by its consumer, leaving the workflow waiting for nothing.
    history = History(WorkflowRuntime([DeepData]), "deep.data", {"where": where})
    (failed,) = history.replay().events
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == "NestingTooDeep"
    assert f"nested 150 levels deep; the limit is {FIELD_MAX_DEPTH}" in failed.message


def test_decide_is_a_deprecated_alias_of_replay_for_one_release() -> None:
    # Renamed to `replay` ("decide" is the orchestrator's decision); code calling the old name
    # keeps working for one release and is told the new one.
    history = History(RUNTIME, "orders.checkout", {"order_id": 17})
    expected = RUNTIME.replay(history.events, now=T0)
    with pytest.warns(DeprecationWarning, match=r"WorkflowRuntime\.replay"):
        got = RUNTIME.decide(history.events, now=T0)
    assert got == expected
    assert [type(e).__name__ for e in got.events] == ["ActivityScheduled"]
