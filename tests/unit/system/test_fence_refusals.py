"""The per-fault-kind figures count stale writes from the claimers' log lines that name FenceRejected."""

from datetime import datetime
from pathlib import Path

from tests.chaos.system.harness import System


def test_fence_refusals_are_read_from_the_claimers_logs_with_their_time(tmp_path: Path) -> None:
    (tmp_path / "claimer-0.log").write_text(
        "2026-12-05 12:22:35,314 WARNING slotflow_claimer.executor: FenceRejected in handler of run r (token 1): x\n"
        "Traceback (most recent call last):\n"
        "slotflow.errors.FenceRejected: x\n"
        "2026-12-05 12:22:36,000 INFO slotflow_claimer.app: unrelated\n"
    )
    (tmp_path / "ticker-0.log").write_text("2026-12-05 12:22:37,000 WARNING x: FenceRejected elsewhere\n")
    system = object.__new__(System)  # only its log directory is needed
    system.log_dir = tmp_path
    moments = system.fence_refusals()
    # The services log local time; the figures compare it with aware UTC instants.
    assert moments == [datetime(2026, 12, 5, 12, 22, 35, 314000).astimezone()]
    assert moments[0].utcoffset() is not None
