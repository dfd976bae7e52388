"""The fold from typed history to workflow state: statuses, saga order, gaps, duplicates."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from slotflow import workflow
from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
    CompensationRegistered,
    HistoryEvent,
    NonDeterminismDetected,
    SignalReceived,
    TimerCancelled,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.contracts.workflows import WORKFLOW_TERMINATED
from slotflow.history import TERMINAL_STATUSES, Recorded, fold, run_history
from slotflow.workflow.testing import WorkflowEnvironment

W = "order-7"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def rec(*events: HistoryEvent) -> list[Recorded]:
    return [Recorded(e, T0 + timedelta(seconds=e.sequence)) for e in events]


def started() -> WorkflowStarted:
    return WorkflowStarted(
        workflow_id=W, sequence=1, workflow_type="checkout", input={"o": 7}, command_id="c1"
    )


def scheduled(seq: int, activity: str, compensates: int | None = None) -> ActivityScheduled:
    return ActivityScheduled(
        workflow_id=W,
        sequence=seq,
        activity=activity,
        run_id=f"{W}/{seq}",
        compensation=compensates is not None,
        compensates=compensates,
    )


def done(seq: int, of: int, result: object = None) -> ActivityCompleted:
    return ActivityCompleted(workflow_id=W, sequence=seq, scheduled_sequence=of, result=result)


def failed(seq: int, of: int) -> ActivityFailed:
    return ActivityFailed(
        workflow_id=W,
        sequence=seq,
        scheduled_sequence=of,
        error_type="NoCarrier",
        message="none",
        permanent=True,
    )


def registered(seq: int, for_step: int, activity: str) -> CompensationRegistered:
    return CompensationRegistered(workflow_id=W, sequence=seq, for_step=for_step, activity=activity)


def saga() -> list[HistoryEvent]:
    """Two steps succeed (each registers its undo), the third fails, undos run newest first."""
    return [
        started(),
        scheduled(2, "inventory.reserve"),
        done(3, 2, {"hold": 1}),
        registered(4, 2, "inventory.release"),
        scheduled(5, "payments.charge"),
        done(6, 5),
        registered(7, 5, "payments.refund"),
        scheduled(8, "shipping.book"),
        failed(9, 8),
        scheduled(10, "payments.refund", compensates=5),
        done(11, 10),
        scheduled(12, "inventory.release", compensates=2),
        done(13, 12),
        WorkflowFailed(workflow_id=W, sequence=14, error_type="NoCarrier", message="none", compensated=True),
    ]


def state_after(n: int) -> dict[str, object]:
    state = fold(rec(*saga()[:n]))
    assert state is not None
    return {
        "status": state.status,
        "step": state.current_step,
        "comp": [(c["activity"], c["state"]) for c in state.compensations],
        "pending": [a["activity"] for a in state.pending_activities],
    }


def test_the_saga_step_by_step() -> None:
    # Started, nothing asked for yet: only a signal could move it (or the first decision, ms away).
    assert state_after(1) == {"status": "running", "step": "a signal", "comp": [], "pending": []}
    assert state_after(2)["step"] == "inventory.reserve"
    assert state_after(8) == {
        "status": "running",
        "step": "shipping.book",
        "comp": [("payments.refund", "registered"), ("inventory.release", "registered")],
        "pending": ["shipping.book"],
    }
    assert state_after(10) == {
        "status": "compensating",
        "step": "payments.refund",
        "comp": [("payments.refund", "running"), ("inventory.release", "registered")],
        "pending": ["payments.refund"],
    }
    assert state_after(12)["comp"] == [("payments.refund", "done"), ("inventory.release", "running")]
    assert state_after(14) == {
        "status": "failed",
        "step": None,
        "comp": [("payments.refund", "done"), ("inventory.release", "done")],
        "pending": [],
    }
    final = fold(rec(*saga()))
    assert final is not None
    assert (final.compensated, final.error, final.last_sequence) == (
        True,
        {"type": "NoCarrier", "message": "none"},
        14,
    )
    assert final.ended_at == T0 + timedelta(seconds=14)
    assert [s["state"] for s in final.steps] == ["completed", "completed", "failed", "completed", "completed"]
    assert final.steps[0]["result"] == {"hold": 1}
    assert final.anomalies == []


def test_a_failed_compensation_shows_failed_and_can_be_retried() -> None:
    events = [*saga()[:10], failed(11, 10)]
    state = fold(rec(*events))
    assert state is not None
    assert state.compensations[0]["state"] == "failed"
    assert state.compensations[0]["error"]["type"] == "NoCarrier"
    retried = fold(rec(*events, scheduled(12, "payments.refund", compensates=5)))
    assert retried is not None
    assert (retried.compensations[0]["state"], retried.compensations[0]["scheduled_sequence"]) == (
        "running",
        12,
    )


def test_timers_signals_and_cancel() -> None:
    timer = TimerStarted(workflow_id=W, sequence=2, timer_id=f"{W}/timer/2", fire_at=T0 + timedelta(hours=1))
    state = fold(rec(started(), timer))
    assert state is not None
    assert state.current_step == f"timer {W}/timer/2"
    assert [t["status"] for t in state.pending_timers] == ["pending"]
    fired = WorkflowTimerFired(
        workflow_id=W, sequence=3, started_sequence=2, timer_id=timer.timer_id, fired_at=T0
    )
    signal = SignalReceived(workflow_id=W, sequence=4, signal="approve", payload={"by": "ops"})
    cancel = CancelRequested(workflow_id=W, sequence=5, reason="customer asked")
    end = WorkflowCancelled(workflow_id=W, sequence=6, reason="customer asked", compensated=True)
    state = fold(rec(started(), timer, fired, signal, cancel))
    assert state is not None
    assert (state.status, state.pending_timers, state.cancel_requested) == ("running", [], True)
    assert state.signals == [
        {
            "sequence": 4,
            "signal": "approve",
            "payload": {"by": "ops"},
            "at": (T0 + timedelta(seconds=4)).isoformat(),
        }
    ]
    state = fold(rec(started(), timer, fired, signal, cancel, end))
    assert state is not None
    assert (state.status, state.cancel_reason, state.compensated) == ("cancelled", "customer asked", True)


def test_completed_carries_its_result_and_nothing_after_counts() -> None:
    late = scheduled(3, "too.late")
    state = fold(rec(started(), WorkflowCompleted(workflow_id=W, sequence=2, result={"ok": 1}), late))
    assert state is not None
    assert (state.status, state.result, state.steps) == ("completed", {"ok": 1}, [])
    assert state.anomalies == ["#3 workflow.activity_scheduled after the workflow ended"]


def test_a_reused_id_shows_its_newest_run_and_only_a_reuse_reopens_it() -> None:
    first = [started(), scheduled(2, "a"), done(3, 2), WorkflowCompleted(workflow_id=W, sequence=4, result=1)]
    again = WorkflowStarted(
        workflow_id=W, sequence=5, workflow_type="checkout", input={"o": 8}, command_id="c2", reused_after=4
    )
    state = fold(rec(*first, again, scheduled(6, "b")))
    assert state is not None
    assert (state.status, state.runs, state.command_id, state.input) == ("running", 2, "c2", {"o": 8})
    assert [s["activity"] for s in state.steps] == ["b"]
    assert state.result is None
    assert state.anomalies == []


def test_the_run_a_start_began_is_cut_where_the_next_start_of_the_reused_id_begins() -> None:
    first = [started(), scheduled(2, "a"), done(3, 2), WorkflowCompleted(workflow_id=W, sequence=4, result=1)]
    again = WorkflowStarted(
        workflow_id=W, sequence=5, workflow_type="checkout", input={"o": 8}, command_id="c2", reused_after=4
    )
    continued = WorkflowContinuedAsNew(workflow_id=W, sequence=6, workflow_type="checkout", input={"o": 9})
    next_run = WorkflowStarted(
        workflow_id=W, sequence=7, workflow_type="checkout", input={"o": 9}, command_id="c2", continued_from=6
    )
    history = rec(*first, again, continued, next_run, scheduled(8, "b"))

    earlier = run_history(history, "c1")
    assert earlier is not None
    assert [r.event.sequence for r in earlier] == [1, 2, 3, 4]
    state = fold(earlier)
    assert state is not None
    assert (state.status, state.result, state.command_id, state.runs) == ("completed", 1, "c1", 1)

    # A continue-as-new keeps the start's command id: the chain is the run its start began.
    newest = run_history(history, "c2")
    assert newest == history
    state = fold(history)
    assert state is not None
    assert (state.status, state.command_id, state.runs) == ("running", "c2", 2)

    assert run_history(history, "c3") is None
    assert run_history(rec(scheduled(2, "a")), "c1") is None  # no sequence 1 yet


def test_a_cancelled_timer_is_no_longer_pending() -> None:
    timer = TimerStarted(workflow_id=W, sequence=2, timer_id=f"{W}/timer/2", fire_at=T0 + timedelta(hours=1))
    cancelled = TimerCancelled(workflow_id=W, sequence=3, started_sequence=2, timer_id=timer.timer_id)
    state = fold(rec(started(), timer, cancelled))
    assert state is not None
    assert (state.pending_timers, state.current_step) == ([], "a signal")
    assert [(t["status"], t["cancelled_sequence"]) for t in state.timers] == [("cancelled", 3)]
    again = TimerCancelled(workflow_id=W, sequence=4, started_sequence=2, timer_id=timer.timer_id)
    twice = fold(rec(started(), timer, cancelled, again))
    assert twice is not None
    assert twice.anomalies == ["#4 cancelled #2, not a pending timer"]


def test_children_are_pending_until_their_outcome() -> None:
    def child(seq: int, name: str) -> ChildWorkflowScheduled:
        return ChildWorkflowScheduled(
            workflow_id=W, sequence=seq, child_workflow_id=name, workflow_type="payments.capture"
        )

    kids = [child(2, "kid-a"), child(3, "kid-b"), child(4, "kid-c")]
    state = fold(rec(started(), *kids))
    assert state is not None
    assert [c["child_workflow_id"] for c in state.pending_children] == ["kid-a", "kid-b", "kid-c"]
    outcomes = [
        ChildWorkflowCompleted(
            workflow_id=W, sequence=5, initiated_sequence=2, child_workflow_id="kid-a", result=7
        ),
        ChildWorkflowFailed(
            workflow_id=W,
            sequence=6,
            initiated_sequence=3,
            child_workflow_id="kid-b",
            error_type="E",
            message="m",
        ),
        ChildWorkflowFailed(
            workflow_id=W,
            sequence=7,
            initiated_sequence=4,
            child_workflow_id="kid-c",
            error_type="WorkflowCancelled",
            message="",
            cancelled=True,
        ),
    ]
    state = fold(rec(started(), *kids, *outcomes))
    assert state is not None
    assert state.pending_children == []
    assert [(c["status"], c["finished_sequence"], c["result"]) for c in state.children] == [
        ("completed", 5, 7),
        ("failed", 6, None),
        ("cancelled", 7, None),
    ]
    assert state.derived()["children"] == state.children


def test_a_run_continued_as_new_leaves_nothing_pending_in_the_next_run() -> None:
    timer = TimerStarted(workflow_id=W, sequence=3, timer_id=f"{W}/timer/3", fire_at=T0 + timedelta(hours=1))
    child = ChildWorkflowScheduled(workflow_id=W, sequence=4, child_workflow_id="kid", workflow_type="k")
    continued = WorkflowContinuedAsNew(workflow_id=W, sequence=5, workflow_type="checkout", input={"o": 8})
    next_run = WorkflowStarted(
        workflow_id=W, sequence=6, workflow_type="checkout", input={"o": 8}, command_id="c1", continued_from=5
    )
    state = fold(rec(started(), scheduled(2, "a"), timer, child, continued, next_run, scheduled(7, "b")))
    assert state is not None
    # Every run's steps stay listed; only the current run's are pending.
    assert [(s["activity"], s["state"]) for s in state.steps] == [("a", "abandoned"), ("b", "scheduled")]
    assert [a["activity"] for a in state.pending_activities] == ["b"]
    assert (state.pending_timers, state.pending_children) == ([], [])
    assert [t["status"] for t in state.timers] == ["abandoned"]
    assert [c["status"] for c in state.children] == ["abandoned"]
    assert (state.status, state.current_step, state.input, state.runs) == ("running", "b", {"o": 8}, 1)
    late = fold(rec(started(), scheduled(2, "a"), timer, child, continued, next_run, done(7, 2)))
    assert late is not None
    assert late.anomalies == ["#7 workflow.activity_completed for #2, not a pending activity"]


def test_non_determinism_stops_the_workflow_until_it_moves_on() -> None:
    diverged = NonDeterminismDetected(
        workflow_id=W, sequence=3, at_sequence=2, expected="activity a", got="activity b"
    )
    state = fold(rec(started(), scheduled(2, "a"), diverged))
    assert state is not None
    assert state.status == "stuck"
    assert state.non_determinism is not None
    assert state.non_determinism["open"] is True
    assert [a["activity"] for a in state.pending_activities] == ["a"]
    resumed = fold(rec(started(), scheduled(2, "a"), diverged, done(4, 2)))
    assert resumed is not None
    assert resumed.status == "running"
    assert resumed.non_determinism is not None
    assert resumed.non_determinism["open"] is False


def test_a_gap_holds_later_events_back() -> None:
    events = rec(started(), scheduled(2, "a"), done(4, 2))
    state = fold(events)
    assert state is not None
    assert (state.last_sequence, state.gap_at) == (2, 3)
    assert fold(rec(scheduled(2, "a"))) is None


def test_results_for_unknown_steps_are_anomalies_not_state() -> None:
    state = fold(rec(started(), done(2, 9), registered(3, 9, "undo")))
    assert state is not None
    assert len(state.anomalies) == 2
    assert state.steps == []


@given(st.data())
def test_duplicates_and_arrival_order_do_not_change_the_state(data: st.DataObject) -> None:
    events = rec(*saga())
    cut = data.draw(st.integers(min_value=1, max_value=len(events)))
    prefix = events[:cut]
    copies = data.draw(st.lists(st.sampled_from(prefix), max_size=10))
    shuffled = data.draw(st.permutations(prefix + copies))
    assert fold(list(shuffled)) == fold(prefix)


def test_a_terminated_workflow_shows_terminated_with_its_timers_cancelled() -> None:
    """Before, a terminate showed as `failed` with its sleep `pending` forever: the orchestrator
    cancels the run's timers when it ends (at the ticker too), and so does the fold."""
    timer = TimerStarted(workflow_id=W, sequence=2, timer_id=f"{W}/timer/2", fire_at=T0 + timedelta(hours=1))
    terminated = WorkflowFailed(
        workflow_id=W, sequence=3, error_type=WORKFLOW_TERMINATED, message="ops: stuck carrier"
    )
    state = fold(rec(started(), timer, terminated))
    assert state is not None
    assert state.status == "terminated"
    assert state.status in TERMINAL_STATUSES
    assert state.error == {"type": WORKFLOW_TERMINATED, "message": "ops: stuck carrier"}
    assert (state.pending_timers, state.current_step, state.waiting) == ([], None, None)
    assert [(t["status"], t["cancelled_sequence"]) for t in state.timers] == [("cancelled", 3)]
    # A failure of the code itself stays `failed`, and ends its timers the same way.
    failed = fold(
        rec(started(), timer, WorkflowFailed(workflow_id=W, sequence=3, error_type="Boom", message="m"))
    )
    assert failed is not None
    assert (failed.status, [t["status"] for t in failed.timers]) == ("failed", ["cancelled"])


def test_a_signal_wait_names_its_signal_and_since_when() -> None:
    """A timed `wait_signal` shows as waiting on that signal (before: `timer wf-1/timer/2`); an
    untimed wait, nothing pending, as waiting on a signal; a plain sleep as its timer."""
    timed = TimerStarted(
        workflow_id=W, sequence=2, timer_id=f"{W}/timer/2", fire_at=T0 + timedelta(days=7), signal="approve"
    )
    state = fold(rec(started(), timed))
    assert state is not None
    assert state.current_step == "signal approve"
    assert state.waiting == {
        "on": "signal",
        "signal": "approve",
        "since": (T0 + timedelta(seconds=2)).isoformat(),
        "timer_id": f"{W}/timer/2",
        "until": (T0 + timedelta(days=7)).isoformat(),
    }
    assert [t["signal"] for t in state.timers] == ["approve"]

    sleep = TimerStarted(workflow_id=W, sequence=2, timer_id=f"{W}/timer/2", fire_at=T0 + timedelta(hours=1))
    sleeping = fold(rec(started(), sleep))
    assert sleeping is not None
    assert (sleeping.current_step, sleeping.waiting) == (f"timer {W}/timer/2", None)

    scheduled = ActivityScheduled(workflow_id=W, sequence=2, activity="payments.charge", run_id=f"{W}/2")
    done = ActivityCompleted(workflow_id=W, sequence=3, scheduled_sequence=2)
    untimed = fold(rec(started(), scheduled, done))
    assert untimed is not None
    assert untimed.current_step == "a signal"
    assert untimed.waiting is not None
    assert (untimed.waiting["signal"], untimed.waiting["since"]) == (
        None,
        (T0 + timedelta(seconds=3)).isoformat(),
    )
    busy = fold(rec(started(), scheduled))
    assert busy is not None
    assert (busy.current_step, busy.waiting) == ("payments.charge", None)


@workflow.defn(name="history.approval")
class AwaitsApproval:
    @workflow.run
    async def run(self) -> str:
        try:
            approval = await workflow.wait_signal("approve", timeout=timedelta(days=7))
        except TimeoutError:
            return "expired"
        return str(approval.get("by"))


async def test_the_runtime_records_which_signal_a_timed_wait_is_for() -> None:
    async with WorkflowEnvironment([AwaitsApproval], replay_every_step=True) as env:
        await env.start_workflow(AwaitsApproval, id="ap-1")
        history = env.history("ap-1")
        (timer,) = [e for e in history if isinstance(e, TimerStarted)]
        assert timer.signal == "approve"
        state = fold([Recorded(e, T0) for e in history])
        assert state is not None
        assert state.current_step == "signal approve"
        await env.signal("ap-1", "approve", {"by": "ops"})
        assert await env.handle("ap-1").result() == "ops"


def test_the_fold_shows_the_memo_and_the_search_attributes_as_start_and_upserts_leave_them() -> None:
    from slotflow.contracts import SearchAttributesUpserted
    from slotflow.contracts.search import search_attribute

    started = WorkflowStarted(
        workflow_id="w",
        sequence=1,
        workflow_type="t",
        command_id="c",
        memo={"note": "gift"},
        search_attributes={"Stage": search_attribute("new"), "Coupon": search_attribute("X")},
    )
    upsert = SearchAttributesUpserted(
        workflow_id="w",
        sequence=2,
        search_attributes={"Stage": search_attribute("paid"), "Coupon": None, "Parcels": search_attribute(2)},
    )
    state = fold(rec(started, upsert))
    assert state is not None
    assert state.memo == {"note": "gift"}
    assert state.search_attributes == {
        "Stage": {"type": "keyword", "value": "paid"},
        "Parcels": {"type": "int", "value": 2},
    }
    assert state.anomalies == []
