"""What the orchestrator purges: the history rows of workflows closed longer ago than
`SLOTFLOW_ORCHESTRATOR_HISTORY_RETENTION_DAYS` (docs/orchestrator.md, "Retention").

The table's history is what decisions replay; a closed workflow is decided again only to answer a
late command (rejected: it has ended) or drop a late outcome, and for that its row is enough
(`stepping.step` reads a closed row without history as ended). So the rows go and the workflow's
row stays, marked `history_purged_at`: its id is never taken again (the history topic, kept
forever, already holds its sequence 1). Open and stuck workflows keep their history however old,
and so does the payload table (the topic's events reference it; `slotflow replay
--payloads-dsn` resolves them there). The record of the activity cancels it sent goes after the
same time.
"""

from datetime import timedelta

from slotflow.pg.retention import Purge
from slotflow.pg.statements import sql
from slotflow_orchestrator.sql import (
    PURGE_ACTIVITY_CANCELS,
    PURGE_CLOSED_HISTORIES,
)


def purges(schema: str, *, days: float) -> list[Purge]:
    return [
        Purge("closed workflow histories", sql(PURGE_CLOSED_HISTORIES, schema), timedelta(days=days)),
        # The claimers took each cancel long before (its record on the topic lasts 7 days).
        Purge("activity cancels", sql(PURGE_ACTIVITY_CANCELS, schema), timedelta(days=days)),
    ]
