"""Every statement the dlq runs, each with the invariant it protects; the functions that run them
are in `store.py` (the writes), `queries.py` (the reads), `notify.py` (the webhook's deliveries) and
`retention.py` (the purges). `{schema}` is the dlq's schema, quoted by `slotflow.pg.statements.sql`.
"""

from slotflow.pg.statements import compose

#: What a status event carries of a letter (`_status_event`).
EVENT_COLUMNS = """id, status, reason, error_type, error, source_service, topic, "partition", "offset",
    key_text, original_type, run_id, job_id, tags, count, redrive_count, first_seen, last_seen,
    status_changed_at, note, redrive_of, workflow_id, sequence, redrive_target"""

PARK = compose(
    """
-- The DLQ record itself is recorded first: delivered again after a crash (same position), it
-- parks nothing and counts nothing.
WITH first_sight AS (
    INSERT INTO {schema}.inbox (event_id, topic) VALUES ($25, $26)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING 1
)
INSERT INTO {schema}.dead_letters AS d (
    id, reason, error_type, error, traceback, source_service, seen_by, topic, "partition", "offset",
    record_key, key_text, headers, value, value_size, value_truncated, record_time, original_type,
    decoded, run_id, job_id, tags, history, redrive_of, prior_redrives, workflow_id, sequence)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, ARRAY[$6::text], $7::text, $8::int,
    $9::bigint, $10::bytea, $11::text, $12::jsonb, $13::bytea, $14::bigint, $15::boolean, $16::timestamptz,
    $17::text, $18::jsonb, $19::text, $20::text, $21::text[], $22::jsonb,
    -- A run that fails again after a redrive parks a new letter (its reopened JobDue is a new
    -- record): it links to the run's letter that was redriven last.
    COALESCE($23::text, (SELECT o.id FROM {schema}.dead_letters o
                          WHERE $19::text IS NOT NULL AND o.run_id = $19::text AND o.id <> $1::text
                            AND o.redrive_count > 0
                          ORDER BY o.status_changed_at DESC LIMIT 1)),
    $24::int, $27::text, $28::int
 WHERE EXISTS (SELECT 1 FROM first_sight)
-- The same origin seen again (a consumer re-sent it, or another consumer group refused it too):
-- one entry, counted, never a second row. Seen again while or after it was redriven, its record
-- failed again at its consumer (a record read back and refused by a later check): parked again,
-- with the new failure; an owner's answer that comes after it then changes nothing (`SETTLE`).
ON CONFLICT (id) DO UPDATE SET
    count = d.count + 1,
    last_seen = now(),
    seen_by = CASE WHEN EXCLUDED.source_service = ANY (d.seen_by) THEN d.seen_by
                   ELSE d.seen_by || EXCLUDED.source_service END,
    status = CASE WHEN d.status IN ('redriving', 'redriven') THEN 'parked' ELSE d.status END,
    status_changed_at = CASE WHEN d.status IN ('redriving', 'redriven') THEN now() ELSE d.status_changed_at END,
    note = CASE WHEN d.status IN ('redriving', 'redriven') THEN 'parked again: its record failed again after the redrive'
                ELSE d.note END,
    reason = CASE WHEN d.status IN ('redriving', 'redriven') THEN EXCLUDED.reason ELSE d.reason END,
    error_type = CASE WHEN d.status IN ('redriving', 'redriven') THEN EXCLUDED.error_type ELSE d.error_type END,
    error = CASE WHEN d.status IN ('redriving', 'redriven') THEN EXCLUDED.error ELSE d.error END,
    traceback = CASE WHEN d.status IN ('redriving', 'redriven') THEN EXCLUDED.traceback ELSE d.traceback END
RETURNING {event_columns}, (xmax = 0) AS inserted
""",
    event_columns=EVENT_COLUMNS,
)

# At most one notification per entry (primary key), staged in the parking transaction.
QUEUE_NOTIFICATION = (
    "INSERT INTO {schema}.notifications (dead_letter_id, payload) VALUES ($1, $2::jsonb) "
    "ON CONFLICT DO NOTHING"
)

#: The same columns of the updated row `d`.
D_EVENT_COLUMNS = ", ".join("d." + c.strip() for c in EVENT_COLUMNS.split(","))

# Recorded in the command's own transaction; the primary key is the command id, so
# `COMMAND_SEEN` finds a redelivered command and it is applied once.
RECORD_COMMAND = (
    "INSERT INTO {schema}.commands (command_id, kind, selection, note, matched) "
    "VALUES ($1, $2, $3::jsonb, $4, $5)"
)

COMMAND_SEEN = "SELECT true FROM {schema}.commands WHERE command_id = $1"

CANDIDATE_COLUMNS = """id, topic, "partition", "offset", source_service, reason, run_id, job_id,
    workflow_id, sequence, prior_redrives, redrive_count, decoded -> 'data' ->> 'slot' AS slot_text"""

# The letters a redrive takes, oldest first, at most $1, locked: two commands over the same letters
# serialise, and the second re-reads them once the first commits (selecting parked letters, the
# default, it finds them redriving already). `{where}` is the selection from $3 on; $2 leaves out
# workflows' parked activities (a bulk redrive: they are retried through their workflow).
CHOOSE = compose(
    """
SELECT {columns} FROM {schema}.dead_letters
 WHERE {where} AND NOT ($2::boolean AND workflow_id IS NOT NULL)
 ORDER BY first_seen, id
 LIMIT $1
   FOR UPDATE
""",
    columns=CANDIDATE_COLUMNS,
)

# How many letters a bulk redrive's selection (`{where}`, from $1) leaves out as workflows' own.
COUNT_WORKFLOW_OWNED = "SELECT count(*) FROM {schema}.dead_letters WHERE {where} AND workflow_id IS NOT NULL"

# Each chosen letter's new state: `redriving` with its latest request, or `redrive_failed` with the
# reason no owner can take it. Its redrive count goes up either way (every redrive asked is counted).
MARK = compose(
    """
UPDATE {schema}.dead_letters d
   SET status = u.status, redrive_count = d.redrive_count + 1, status_changed_at = now(), note = u.note,
       request_id = u.request_id, redrive_target = u.target
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
       AS u(id, status, note, request_id, target)
 WHERE d.id = u.id
RETURNING {event_columns}
""",
    event_columns=D_EVENT_COLUMNS,
)

# One row per request (primary key: its random id). A refusal found at staging is answered at once.
RECORD_REQUESTS = """
INSERT INTO {schema}.redrive_requests (request_id, dead_letter_id, command_id, target, kind, definition,
    redrive, answered_at, outcome, reason)
SELECT u.request_id, u.dead_letter_id, $1, u.target, u.kind, $2, u.redrive,
       CASE WHEN u.outcome IS NULL THEN NULL ELSE now() END, u.outcome, u.reason
  FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::text[])
       AS u(request_id, dead_letter_id, target, kind, redrive, outcome, reason)
"""

# Discarded entries keep their bytes (for the record) and are never sent; locked as in CHOOSE.
DISCARD = compose(
    """
WITH chosen AS (
    SELECT id FROM {schema}.dead_letters WHERE {where}
     ORDER BY first_seen, id LIMIT $1 FOR UPDATE
)
UPDATE {schema}.dead_letters d
   SET status = 'discarded', status_changed_at = now(), note = $2
  FROM chosen WHERE d.id = chosen.id
RETURNING {event_columns}
""",
    event_columns=D_EVENT_COLUMNS,
)

# The request an answer names, with its letter, both locked: two answers to one request (a
# redelivery, a replica) serialise, and the second finds it answered.
REQUEST_OF_ANSWER = """
SELECT r.request_id, r.dead_letter_id, r.target, r.answered_at, d.request_id AS latest, d.status
  FROM {schema}.redrive_requests r JOIN {schema}.dead_letters d ON d.id = r.dead_letter_id
 WHERE r.request_id = $1
   FOR UPDATE
"""

# The first answer of a request is kept; later ones change nothing.
RECORD_ANSWER = """
UPDATE {schema}.redrive_requests SET answered_at = now(), outcome = $2, reason = $3
 WHERE request_id = $1 AND answered_at IS NULL
"""

# Only the letter's latest request, while it waits, moves it: `redriven` once its owner did it,
# `redrive_failed` with the owner's reason.
SETTLE = compose(
    """
UPDATE {schema}.dead_letters d
   SET status = $2, status_changed_at = now(), note = $3
 WHERE d.id = $1 AND d.request_id = $4 AND d.status = 'redriving'
RETURNING {event_columns}
""",
    event_columns=D_EVENT_COLUMNS,
)


SUMMARY = """id, status, reason, error_type, left(error, 2000) AS error, source_service, seen_by, topic,
    "partition", "offset", key_text, original_type, run_id, job_id, tags, count, redrive_count,
    value_size, value_truncated, first_seen, last_seen, status_changed_at, note, redrive_of, workflow_id,
    sequence, redrive_target"""

#: A page, newest first; `{where}` is the selection's clause from `$2` on (`$1` is the limit).
PAGE = compose(
    "SELECT {summary} FROM {schema}.dead_letters WHERE {where} ORDER BY first_seen DESC, id DESC LIMIT $1",
    summary=SUMMARY,
)

# One entry with everything kept of it; the id is matched as text made storable (`pg_text`).
DETAIL = compose(
    """
SELECT {summary}, error AS full_error, traceback, record_key, value, headers::text AS headers,
       decoded::text AS decoded, history::text AS history, record_time, prior_redrives
  FROM {schema}.dead_letters WHERE id = $1
""",
    summary=SUMMARY,
)

# An entry's redrive requests and their answers, oldest first.
REDRIVES_OF = (
    "SELECT request_id, command_id, target, kind, definition, redrive, requested_at, answered_at, outcome, "
    "reason FROM {schema}.redrive_requests WHERE dead_letter_id = $1 ORDER BY requested_at, request_id"
)

# The gauges read the parked entries by the database clock; no row is locked.
PARKED_BY_REASON = (
    "SELECT reason, count(*) AS n FROM {schema}.dead_letters WHERE status = 'parked' GROUP BY reason"
)

OLDEST_PARKED_AGE = (
    "SELECT COALESCE(extract(epoch FROM now() - min(first_seen)), 0) FROM {schema}.dead_letters "
    "WHERE status = 'parked'"
)

# A request nobody answered keeps its letter `redriving`: the age of the oldest such request, of a
# letter still waiting on it (redrive_requests_waiting), by the database clock.
OLDEST_REDRIVING_AGE = """
SELECT COALESCE(extract(epoch FROM now() - min(r.requested_at)), 0)
  FROM {schema}.redrive_requests r JOIN {schema}.dead_letters d ON d.request_id = r.request_id
 WHERE r.answered_at IS NULL AND d.status = 'redriving'
"""


# Due notifications, each leased by moving next_at past the delivery's deadline: SKIP LOCKED so
# several notifiers split them, and a notifier that dies mid-delivery leaves its lease to expire,
# after which another delivers again (the receiver dedupes on the Idempotency-Key it is sent).
NOTIFICATION_LEASE_DUE = """
UPDATE {schema}.notifications n
   SET attempts = n.attempts + 1, next_at = now() + make_interval(secs => $2)
 WHERE dead_letter_id IN (
        SELECT dead_letter_id FROM {schema}.notifications
         WHERE delivered_at IS NULL AND gave_up_at IS NULL AND next_at <= now()
         ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING dead_letter_id, payload::text AS payload, attempts
"""

NOTIFICATION_DELIVERED = (
    "UPDATE {schema}.notifications SET delivered_at = now(), last_error = '' WHERE dead_letter_id = $1"
)

NOTIFICATION_GAVE_UP = (
    "UPDATE {schema}.notifications SET gave_up_at = now(), last_error = $2 WHERE dead_letter_id = $1"
)

# The next attempt's time from the database clock plus the full-jitter delay.
NOTIFICATION_RETRY_LATER = """
UPDATE {schema}.notifications SET next_at = now() + make_interval(secs => $2), last_error = $3
 WHERE dead_letter_id = $1
"""


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
