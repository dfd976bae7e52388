"""Overlap policies as a pure choice, and the waves that keep one job's decisions in order."""

from hypothesis import given
from hypothesis import strategies as st

from slotflow_claimer.intake import OverlapChoice, choose_by_overlap, waves
from slotflow_claimer.store import Active
from tests.unit.claimer.support import due

RUNNING = Active("job@1", "job", "running")
BUFFERED = Active("job@2", "job", "pending")


def test_nothing_active_always_claims() -> None:
    for policy in ("allow", "skip", "buffer_one", "buffer_all", "cancel_previous"):
        assert choose_by_overlap(policy, []).action == "claim"


def test_allow_claims_beside_a_running_run() -> None:
    assert choose_by_overlap("allow", [RUNNING]).action == "claim"


def test_skip_skips_while_a_run_runs_and_names_it() -> None:
    choice = choose_by_overlap("skip", [RUNNING])
    assert choice.action == "skip"
    assert "job@1" in choice.reason


def test_buffer_one_buffers_one_and_skips_the_next() -> None:
    assert choose_by_overlap("buffer_one", [RUNNING]).action == "buffer"
    assert choose_by_overlap("buffer_one", [RUNNING, BUFFERED]).action == "skip"


def test_buffer_all_queues_every_run_behind_the_ones_ahead() -> None:
    assert choose_by_overlap("buffer_all", [RUNNING]).action == "buffer"
    assert choose_by_overlap("buffer_all", [RUNNING, BUFFERED]).action == "buffer"
    assert "job@2" in choose_by_overlap("buffer_all", [RUNNING, BUFFERED]).reason


def test_buffer_all_claims_beside_running_runs_up_to_max_concurrent_unless_one_waits() -> None:
    second = Active("job@3", "job", "running")
    assert choose_by_overlap("buffer_all", [RUNNING], max_concurrent=2).action == "claim"
    assert choose_by_overlap("buffer_all", [RUNNING, second], max_concurrent=2).action == "buffer"
    # A run waiting ahead keeps its place: the new one queues behind it.
    assert choose_by_overlap("buffer_all", [BUFFERED], max_concurrent=5).action == "buffer"


def test_cancel_previous_cancels_the_running_run_and_replaces_the_buffered_one() -> None:
    choice = choose_by_overlap("cancel_previous", [RUNNING, BUFFERED])
    assert choice.action == "buffer"
    assert choice.cancel == ("job@1",)
    assert choice.supersede == ("job@2",)
    assert choose_by_overlap("cancel_previous", [BUFFERED]) == OverlapChoice("claim", supersede=("job@2",))


jobs = st.sampled_from(["a", "b", "c"])
runs = st.sampled_from(["1", "2", "3"])
policies = st.sampled_from(["allow", "skip"])


@given(st.lists(st.tuples(jobs, runs, policies), max_size=30))
def test_waves_keep_run_ids_unique_and_one_guarded_run_per_job(items: list[tuple[str, str, str]]) -> None:
    dues = [due(job, f"{job}@{run}", overlap=policy, offset=i) for i, (job, run, policy) in enumerate(items)]
    result = waves(dues)
    assert sorted(d.record.offset for wave in result for d in wave) == list(range(len(dues)))
    position = {d.record.offset: index for index, wave in enumerate(result) for d in wave}
    for wave in result:
        run_ids = [d.job.run_id for d in wave]
        assert len(run_ids) == len(set(run_ids))
        guarded = [d.job.job_id for d in wave if d.job.overlap != "allow"]
        assert len(guarded) == len(set(guarded))
    # A later record of the same run, or of the same job under a policy, lands in a later wave.
    for i, a in enumerate(dues):
        for b in dues[i + 1 :]:
            same_run = a.job.run_id == b.job.run_id
            same_guarded_job = a.job.job_id == b.job.job_id and "allow" not in (a.job.overlap, b.job.overlap)
            if same_run or same_guarded_job:
                assert position[a.record.offset] < position[b.record.offset]
