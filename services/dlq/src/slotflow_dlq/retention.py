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

# Resolved letters older than $1 seconds, at most $2, oldest change first (dead_letters_resolved).
# The sibling DELETEs clear the rows that reference a doomed letter; the foreign keys are checked
# at the end of the statement, after all three.
PURGE_RESOLVED = """
WITH doomed AS (
    SELECT d.id FROM {schema}.dead_letters d
     WHERE d.status IN ('redriven', 'discarded')
       AND d.status_changed_at < now() - make_interval(secs => $1)
     ORDER BY d.status_changed_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), notified AS (
    DELETE FROM {schema}.notifications WHERE dead_letter_id IN (SELECT id FROM doomed)
), requested AS (
    DELETE FROM {schema}.redrive_requests WHERE dead_letter_id IN (SELECT id FROM doomed)
)
DELETE FROM {schema}.dead_letters WHERE id IN (SELECT id FROM doomed) RETURNING id
"""

# Letters nobody resolved (parked, or their redrive refused), first seen more than $1 seconds ago
# (dead_letters_status_seen), when an operator has chosen to let them expire.
PURGE_PARKED = """
WITH doomed AS (
    SELECT d.id FROM {schema}.dead_letters d
     WHERE d.status IN ('parked', 'redrive_failed')
       AND d.first_seen < now() - make_interval(secs => $1)
     ORDER BY d.first_seen
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), notified AS (
    DELETE FROM {schema}.notifications WHERE dead_letter_id IN (SELECT id FROM doomed)
), requested AS (
    DELETE FROM {schema}.redrive_requests WHERE dead_letter_id IN (SELECT id FROM doomed)
)
DELETE FROM {schema}.dead_letters WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


def purges(schema: str, *, resolved_days: float, parked_days: float) -> list[Purge]:
    return [
        Purge("resolved dead letters", sql(PURGE_RESOLVED, schema), timedelta(days=resolved_days)),
        Purge("parked dead letters", sql(PURGE_PARKED, schema), timedelta(days=parked_days)),
    ]
