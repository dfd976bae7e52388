"""The open-work fold the orchestrator decides with, and its agreement with the read model's fold
on generated histories: runs (continue-as-new, a reused id), parked activities, cancelled timers,
children."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow import workflow
from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityScheduled,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
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
from slotflow.history import TERMINAL_STATUSES, OpenWork, Recorded, fold
from slotflow.runs import RunContext
from slotflow.workflow.testing import WorkflowEnvironment

W = "loop-3"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def started(
    sequence: int = 1, *, continued_from: int | None = None, reused_after: int | None = None
) -> WorkflowStarted:
    return WorkflowStarted(
        workflow_id=W,
        sequence=sequence,
        workflow_type="loop",
        command_id="c1",
        continued_from=continued_from,
        reused_after=reused_after,
    )


def scheduled(sequence: int) -> ActivityScheduled:
    return ActivityScheduled(workflow_id=W, sequence=sequence, activity="a", run_id=f"{W}/{sequence}")


def test_it_follows_runs_and_the_chain_they_continue() -> None:
    history: list[HistoryEvent] = [
        started(),
        scheduled(2),
        WorkflowContinuedAsNew(workflow_id=W, sequence=3, workflow_type="loop"),
        started(4, continued_from=3),
        scheduled(5),
    ]
    work = OpenWork.of(history)
    assert (list(work.activities), work.chain_start, work.ended) == ([5], 1, False)
    assert work.run is history[3]
    end = WorkflowCompleted(workflow_id=W, sequence=6, result=None)
    work.see(end)
    # What was pending when the run closed stays listed: its children get their close policy.
    assert (work.ended, work.end, list(work.activities)) == (True, end, [5])
    work.see(started(7, reused_after=6))
    assert (work.ended, work.chain_start, work.activities) == (False, 7, {})


def test_a_parked_activity_stays_pending_and_divergence_is_the_newest_event() -> None:
    parked = ActivityParked(
        workflow_id=W, sequence=3, scheduled_sequence=2, reason="max_attempts", error_type="E", message="m"
    )
    diverged = NonDeterminismDetected(workflow_id=W, sequence=4, at_sequence=2, expected="x", got="y")
    work = OpenWork.of([started(), scheduled(2), parked, diverged])
    assert (list(work.activities), work.diverged) == ([2], True)
    work.see(ActivityCompleted(workflow_id=W, sequence=5, scheduled_sequence=2))
    assert (work.activities, work.diverged) == ({}, False)


@st.composite
def histories(draw: st.DrawFn) -> list[HistoryEvent]:
    """A valid history as the orchestrator appends it: a random walk over what may come next."""
    events: list[HistoryEvent] = [started()]
    activities: set[int] = set()
    timers: dict[int, str] = {}
    children: dict[int, str] = {}
    ended = False
    for _ in range(draw(st.integers(min_value=0, max_value=30))):
        seq = len(events) + 1
        if ended:
            if not draw(st.booleans()):
                break
            events.append(started(seq, reused_after=seq - 1))
            activities, timers, children, ended = set(), {}, {}, False
            continue
        moves = ["schedule", "timer", "child", "signal", "diverge", "continue", "end"]
        moves += ["complete", "fail", "park"] if activities else []
        moves += ["fire", "cancel_timer"] if timers else []
        moves += ["child_done", "child_failed"] if children else []
        move = draw(st.sampled_from(moves))
        event: HistoryEvent
        if move == "schedule":
            event = scheduled(seq)
            activities.add(seq)
        elif move in ("complete", "fail", "park"):
            of = draw(st.sampled_from(sorted(activities)))
            if move == "complete":
                event = ActivityCompleted(workflow_id=W, sequence=seq, scheduled_sequence=of, result=seq)
                activities.discard(of)
            elif move == "fail":
                event = ActivityFailed(
                    workflow_id=W, sequence=seq, scheduled_sequence=of, error_type="E", message="m"
                )
                activities.discard(of)
            else:
                event = ActivityParked(
                    workflow_id=W, sequence=seq, scheduled_sequence=of, reason="max_attempts", error_type="E"
                )
        elif move == "timer":
            timer_id = f"{W}/timer/{seq}"
            event = TimerStarted(
                workflow_id=W, sequence=seq, timer_id=timer_id, fire_at=T0 + timedelta(hours=1)
            )
            timers[seq] = timer_id
        elif move in ("fire", "cancel_timer"):
            of = draw(st.sampled_from(sorted(timers)))
            timer_id = timers.pop(of)
            if move == "fire":
                event = WorkflowTimerFired(
                    workflow_id=W, sequence=seq, started_sequence=of, timer_id=timer_id, fired_at=T0
                )
            else:
                event = TimerCancelled(workflow_id=W, sequence=seq, started_sequence=of, timer_id=timer_id)
        elif move == "child":
            child_id = f"{W}-child-{seq}"
            event = ChildWorkflowScheduled(
                workflow_id=W, sequence=seq, child_workflow_id=child_id, workflow_type="k"
            )
            children[seq] = child_id
        elif move in ("child_done", "child_failed"):
            of = draw(st.sampled_from(sorted(children)))
            child_id = children.pop(of)
            if move == "child_done":
                event = ChildWorkflowCompleted(
                    workflow_id=W, sequence=seq, initiated_sequence=of, child_workflow_id=child_id
                )
            else:
                event = ChildWorkflowFailed(
                    workflow_id=W,
                    sequence=seq,
                    initiated_sequence=of,
                    child_workflow_id=child_id,
                    error_type="E",
                    message="m",
                    cancelled=draw(st.booleans()),
                )
        elif move == "signal":
            event = SignalReceived(workflow_id=W, sequence=seq, signal="go")
        elif move == "diverge":
            event = NonDeterminismDetected(
                workflow_id=W, sequence=seq, at_sequence=seq - 1, expected="x", got="y"
            )
        elif move == "continue":
            events.append(WorkflowContinuedAsNew(workflow_id=W, sequence=seq, workflow_type="loop"))
            event = started(seq + 1, continued_from=seq)
            activities, timers, children = set(), {}, {}
        else:
            end_type = draw(st.sampled_from([WorkflowCompleted, WorkflowFailed, WorkflowCancelled]))
            if end_type is WorkflowFailed:
                event = WorkflowFailed(workflow_id=W, sequence=seq, error_type="E", message="m")
            else:
                event = end_type(workflow_id=W, sequence=seq)
            ended = True
        events.append(event)
    return events


def assert_they_agree(history: list[HistoryEvent]) -> None:
    """After every event: the read model's pending work, end and divergence are the open work's."""
    work = OpenWork()
    for cut, event in enumerate(history, start=1):
        work.see(event)
        state = fold([Recorded(e, T0 + timedelta(seconds=e.sequence)) for e in history[:cut]])
        assert state is not None
        assert [a["sequence"] for a in state.pending_activities] == sorted(work.activities)
        if work.ended:
            # The timers the orchestrator cancels when the run ends are the ones the fold shows
            # cancelled by that end.
            assert work.end is not None
            ended_by = [t["sequence"] for t in state.timers if t["cancelled_sequence"] == work.end.sequence]
            assert ended_by == sorted(work.timers)
            assert state.pending_timers == []
        else:
            assert [t["sequence"] for t in state.pending_timers] == sorted(work.timers)
        assert [c["sequence"] for c in state.pending_children] == sorted(work.children)
        assert (state.status in TERMINAL_STATUSES) == work.ended
        assert (state.status == "stuck") == work.diverged
        assert work.run is not None
        assert (state.workflow_type, state.input, state.command_id) == (
            work.run.workflow_type,
            work.run.input,
            work.run.command_id,
        )
        assert state.anomalies == []
    assert work == OpenWork.of(history)


@settings(max_examples=300)
@given(histories())
def test_the_read_model_and_the_orchestrator_see_the_same_open_work(history: list[HistoryEvent]) -> None:
    assert_they_agree(history)


@workflow.defn(name="history.invoice")
class Invoice:
    @workflow.run
    async def run(self, order: dict[str, int]) -> dict[str, int]:
        pages: dict[str, int] = await workflow.execute_activity("invoices.render", order)
        return pages


@workflow.defn(name="history.rounds")
class Rounds:
    """A child per round, a wait for a signal bounded by a timer, then the next run."""

    @workflow.run
    async def run(self, state: dict[str, int]) -> dict[str, int]:
        rounds = state.get("round", 0)
        await workflow.execute_child_workflow(Invoice, {"round": rounds}, id=f"rounds-invoice-{rounds}")
        await workflow.wait_signal("go", timeout=timedelta(hours=1))
        if rounds < 2:
            workflow.continue_as_new({"round": rounds + 1})
        return {"rounds": rounds + 1}


async def test_they_agree_on_recorded_histories_with_runs_children_and_cancelled_timers() -> None:
    async def render(ctx: RunContext) -> dict[str, int]:
        return {"pages": 1}

    async with WorkflowEnvironment(
        [Rounds, Invoice], activities={"invoices.render": render}, replay_every_step=True
    ) as env:
        handle = await env.start_workflow(Rounds, {}, id="rounds-1")
        for _ in range(3):
            await env.signal("rounds-1", "go")
        assert await handle.result() == {"rounds": 3}
        history = env.history("rounds-1")
        kinds = {type(e) for e in history}
        assert {WorkflowContinuedAsNew, ChildWorkflowCompleted, TimerCancelled} <= kinds
        for workflow_id in ("rounds-1", "rounds-invoice-0", "rounds-invoice-2"):
            assert_they_agree(env.history(workflow_id))
