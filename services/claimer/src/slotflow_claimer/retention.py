"""What the claimer purges: runs that ended (completed, skipped, cancelled) longer ago than
`SLOTFLOW_CLAIMER_RUN_RETENTION_DAYS` (docs/claimer.md, "Retention").

A run's row is its dedupe key: a JobDue arriving after its run was purged would run again. So the
retention must outlast every way an old JobDue can come back: the jobs.due topic keeps records 7
days (a consumer group reset replays them), hence the setting's floor. Dead-lettered runs are kept
(a redrive continues them, with their attempt count and budget), and so are live ones. The record
of a workflow's activity cancels goes after the same time.
"""

from datetime import timedelta

from slotflow.pg.retention import Purge
from slotflow.pg.statements import sql
from slotflow_claimer.sql import (
    PURGE_ACTIVITY_CANCELS,
    PURGE_ENDED,
)


def purges(schema: str, *, days: float) -> list[Purge]:
    return [
        Purge("ended runs", sql(PURGE_ENDED, schema), timedelta(days=days)),
        Purge("activity cancels", sql(PURGE_ACTIVITY_CANCELS, schema), timedelta(days=days)),
    ]
