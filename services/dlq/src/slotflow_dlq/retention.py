"""What the DLQ service purges, and when (docs/dlq.md, "Retention").

Resolved letters (redriven or discarded) go `SLOTFLOW_DLQ_RETENTION_DAYS` after their status
last changed; parked ones are kept until someone resolves them, unless
`SLOTFLOW_DLQ_PARKED_RETENTION_DAYS` is set. A letter with a redrive still waiting to be published
is never purged (the relay needs its row), and its notification and redrive rows go with it.
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
       AND NOT EXISTS (SELECT 1 FROM {schema}.redrives r
                        WHERE r.dead_letter_id = d.id AND r.published_at IS NULL)
     ORDER BY d.status_changed_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), notified AS (
    DELETE FROM {schema}.notifications WHERE dead_letter_id IN (SELECT id FROM doomed)
), resent AS (
    DELETE FROM {schema}.redrives WHERE dead_letter_id IN (SELECT id FROM doomed)
)
DELETE FROM {schema}.dead_letters WHERE id IN (SELECT id FROM doomed) RETURNING id
"""

# Parked letters first seen more than $1 seconds ago (dead_letters_status_seen), when an
# operator has chosen to let unresolved letters expire.
PURGE_PARKED = """
WITH doomed AS (
    SELECT d.id FROM {schema}.dead_letters d
     WHERE d.status = 'parked'
       AND d.first_seen < now() - make_interval(secs => $1)
       AND NOT EXISTS (SELECT 1 FROM {schema}.redrives r
                        WHERE r.dead_letter_id = d.id AND r.published_at IS NULL)
     ORDER BY d.first_seen
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), notified AS (
    DELETE FROM {schema}.notifications WHERE dead_letter_id IN (SELECT id FROM doomed)
), resent AS (
    DELETE FROM {schema}.redrives WHERE dead_letter_id IN (SELECT id FROM doomed)
)
DELETE FROM {schema}.dead_letters WHERE id IN (SELECT id FROM doomed) RETURNING id
"""


def purges(schema: str, *, resolved_days: float, parked_days: float) -> list[Purge]:
    return [
        Purge("resolved dead letters", sql(PURGE_RESOLVED, schema), timedelta(days=resolved_days)),
        Purge("parked dead letters", sql(PURGE_PARKED, schema), timedelta(days=parked_days)),
    ]
