"""What the DLQ service purges, and when (docs/dlq.md, "Retention").

Resolved letters (redriven or discarded) go `SLOTFLOW_DLQ_RETENTION_DAYS` after their status
last changed; letters waiting for a person (parked, or a redrive refused) are kept until someone
resolves them, unless `SLOTFLOW_DLQ_PARKED_RETENTION_DAYS` is set. A letter whose redrive waits for
its owner's answer (`redriving`) is never purged: the answer needs its row. Its notification and
redrive request rows go with it.
"""

from datetime import timedelta

from slotflow.pg.retention import Purge
from slotflow.pg.statements import sql
from slotflow_dlq.sql import (
    PURGE_PARKED,
    PURGE_RESOLVED,
)


def purges(schema: str, *, resolved_days: float, parked_days: float) -> list[Purge]:
    return [
        Purge("resolved dead letters", sql(PURGE_RESOLVED, schema), timedelta(days=resolved_days)),
        Purge("parked dead letters", sql(PURGE_PARKED, schema), timedelta(days=parked_days)),
    ]
