"""What the orchestrator purges: the history rows of workflows closed longer ago than
`SLOTFLOW_ORCHESTRATOR_HISTORY_RETENTION_DAYS` (docs/orchestrator.md, "Retention").

The table's history is what decisions replay; a closed workflow is decided again only to answer a
late command (rejected: it has ended) or drop a late outcome, and for that its row is enough
(`stepping.step` reads a closed row without history as ended). So the rows go and the workflow's
row stays, marked `history_purged_at`: its id is never taken again (the history topic, kept
forever, already holds its sequence 1). Open and stuck workflows keep their history however old,
and so does the payload table (the topic's events reference it; `slotflow replay
--payloads-dsn` resolves them there).
"""

from datetime import timedelta

from slotflow.pg.retention import Purge
from slotflow.pg.statements import sql

# Closed workflows whose history is still here and that closed more than $1 seconds ago, at most
# $2, oldest first (workflows_closed_kept). Their rows are locked (FOR UPDATE, as a decision locks
# them), and a closed workflow is never appended to, so the one statement sees all of its history.
PURGE_CLOSED_HISTORIES = """
WITH doomed AS (
    SELECT workflow_id FROM {schema}.workflows
     WHERE status IN ('completed', 'failed', 'cancelled') AND history_purged_at IS NULL
       AND COALESCE(closed_at, started_at) < now() - make_interval(secs => $1)
     ORDER BY COALESCE(closed_at, started_at)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), emptied AS (
    DELETE FROM {schema}.history WHERE workflow_id IN (SELECT workflow_id FROM doomed)
)
UPDATE {schema}.workflows AS w SET history_purged_at = now()
  FROM doomed WHERE w.workflow_id = doomed.workflow_id
RETURNING w.workflow_id
"""


def purges(schema: str, *, days: float) -> list[Purge]:
    return [Purge("closed workflow histories", sql(PURGE_CLOSED_HISTORIES, schema), timedelta(days=days))]
