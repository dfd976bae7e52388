"""The run retention cannot be shorter than the jobs.due topic keeps a JobDue that could come back."""

import pytest
from pydantic import ValidationError

from slotflow_claimer.config import MIN_RUN_RETENTION_DAYS, ClaimerSettings


@pytest.mark.parametrize("days", [0, MIN_RUN_RETENTION_DAYS, 30, 365.5])
def test_zero_or_at_least_the_floor_is_accepted(days: float) -> None:
    assert ClaimerSettings(run_retention_days=days).run_retention_days == days


@pytest.mark.parametrize("days", [0.5, 3, 7.9])
def test_a_retention_a_replayed_job_due_could_outlive_is_refused(days: float) -> None:
    with pytest.raises(ValidationError, match=r"7-day jobs\.due topic"):
        ClaimerSettings(run_retention_days=days)
