"""Every statement the ticker runs, each with the invariant it protects.

`{schema}` is the ticker's schema, quoted by `slotflow.pg.statements.sql`. Statements that decide
whether something is due compare with `now()`, the database clock, and never take a host time.
"""

from dataclasses import dataclass

from slotflow.pg.instants import FROM_MICROS
from slotflow.pg.statements import compose, sql

_SCHEDULE_COLUMNS = (
    "schedule_id, definition::text AS definition, version, paused, pause_reason, resume_at, "
    "paused_at, resumed_at, next_slot, next_fire_at, covered_until, deleted, resume_catch_up"
)

# The claim. FOR UPDATE SKIP LOCKED hands each due row to exactly one of any number of tickers
# running this at once: a row another ticker holds is skipped, not waited for. The row stays locked
# until the transaction that stages its JobDue rows and advances its grid commits, so a slot is
# staged by the transaction that moves the grid past it, or by none. Walking schedules_due in
# next_fire_at order with LIMIT keeps the cost proportional to the batch, not to the table.
#: The cron rules this version reads expressions with (slotflow_ticker.cron_review): a definition
#: stored under older rules is reviewed before any ticker of this version fires it.
CRON_RULES = 2

# A row stored under older cron rules (cron_rules below this version's) is left to the review,
# which pauses it if its expression now reads differently, so no ticker of this version fires a
# slot of a meaning nobody chose; a ticker of the previous version still fires it as it always did.
CLAIM_DUE = """
SELECT {columns}, ctid::text AS row_tid, now() AS db_now
  FROM {schema}.schedules
 WHERE next_fire_at <= now() AND NOT paused AND NOT deleted AND next_fire_at IS NOT NULL
   AND cron_rules >= {cron_rules}
 ORDER BY next_fire_at
 FOR UPDATE SKIP LOCKED
 LIMIT $1
"""

# Advance the claimed rows' grids in one statement. Only rows this transaction holds are touched:
# they are found by the tuple ids the claim returned (a TID scan, no index walk), which stay valid
# because the claim's row locks keep every other writer, and VACUUM FULL or CLUSTER, off them until
# this transaction ends. The caller checks that every row was updated. The instants arrive as int8
# microseconds (slotflow.pg.instants: a fraction of asyncpg's cost per timestamptz).
ADVANCE = compose(
    """
UPDATE {schema}.schedules AS s
   SET next_slot = {next_slot},
       next_fire_at = {next_fire_at},
       covered_until = {covered_until},
       updated_at = now()
  FROM unnest($1::text[]::tid[], $2::int8[], $3::int8[], $4::int8[])
       AS u(row_tid, next_slot, next_fire_at, covered_until)
 WHERE s.ctid = u.row_tid
""",
    next_slot=FROM_MICROS.format("u.next_slot"),
    next_fire_at=FROM_MICROS.format("u.next_fire_at"),
    covered_until=FROM_MICROS.format("u.covered_until"),
)

# Paused rows whose automatic resume time passed (database clock); SKIP LOCKED so concurrent
# tickers resume each row once. An automatic resume never catches up: the slots that passed
# meanwhile are then due and recorded as skipped (`paused`, planning.PauseWindow).
# The resume's time (resumed_at, and its ScheduleResumed's) is the clock once the row is held, not
# the transaction's start: a pause that committed after this transaction began is read here and
# resumed, and the api orders a schedule's changes (the timeline the slot audit reads) by the time
# each carries, so the resume must not look older than the pause it undoes.
AUTO_RESUME = """
UPDATE {schema}.schedules AS s
   SET paused = false, resumed_at = clock_timestamp(), resume_catch_up = false, updated_at = now()
  FROM (SELECT schedule_id FROM {schema}.schedules
         WHERE paused AND NOT deleted AND resume_at IS NOT NULL AND resume_at <= now()
         ORDER BY resume_at
         FOR UPDATE SKIP LOCKED
         LIMIT $1) AS due
 WHERE s.schedule_id = due.schedule_id
RETURNING s.schedule_id, s.resume_at, s.next_fire_at, s.resumed_at AS db_now
"""

# Timers due by the database clock, one ticker each (same argument as CLAIM_DUE).
CLAIM_TIMERS = """
SELECT timer_id, fire_at, action::text AS action, trace_parent
  FROM {schema}.timers
 WHERE state = 'pending' AND fire_at <= now()
 ORDER BY fire_at
 FOR UPDATE SKIP LOCKED
 LIMIT $1
"""

# Marked fired in the transaction that stages their events: fired once, or not at all.
MARK_TIMERS_FIRED = """
UPDATE {schema}.timers SET state = 'fired', fired_at = now()
 WHERE timer_id = ANY($1::text[]) AND state = 'pending'
"""

# What the timing wheel holds: rows due within the horizon. Read without locks: the wheel only
# says when to run the claim; the claim alone decides who fires what.
HORIZON_SCHEDULES = """
SELECT schedule_id, next_fire_at
  FROM {schema}.schedules
 WHERE next_fire_at <= now() + make_interval(secs => $1) AND NOT paused AND NOT deleted
   AND next_fire_at IS NOT NULL AND cron_rules >= {cron_rules}
 ORDER BY next_fire_at
 LIMIT $2
"""

# Incremental: only rows that entered the horizon since the last load (the rest are in the wheel
# already, or were moved by a claim that put them back into some replica's wheel itself).
HORIZON_SCHEDULES_AFTER = """
SELECT schedule_id, next_fire_at
  FROM {schema}.schedules
 WHERE next_fire_at > $3 AND next_fire_at <= now() + make_interval(secs => $1) AND NOT paused
   AND NOT deleted AND cron_rules >= {cron_rules}
 ORDER BY next_fire_at
 LIMIT $2
"""

HORIZON_TIMERS_AFTER = """
SELECT timer_id, fire_at
  FROM {schema}.timers
 WHERE state = 'pending' AND fire_at > $3 AND fire_at <= now() + make_interval(secs => $1)
 ORDER BY fire_at
 LIMIT $2
"""

HORIZON_TIMERS = """
SELECT timer_id, fire_at
  FROM {schema}.timers
 WHERE state = 'pending' AND fire_at <= now() + make_interval(secs => $1)
 ORDER BY fire_at
 LIMIT $2
"""

NOW = "SELECT now()"

# The instant of a command on an existing schedule, read once it holds the row (LOCK_SCHEDULE),
# never its transaction's start: a claim or an automatic resume that held the row first and
# committed carries a later now(), and the api orders a schedule's changes (the timeline the slot
# audit reads) by the time each carries, so a change applied after another must not look older than
# it. A create of a new id has no row anyone else could hold: it keeps the transaction's start,
# which is also its row's created_at, where its grid begins.
LOCKED_NOW = "SELECT clock_timestamp()"

# A schedule's stored definition, for `preview --schedule` (a deleted one has none).
STORED_DEFINITION = "SELECT definition::text FROM {schema}.schedules WHERE schedule_id = $1 AND NOT deleted"

# Commands lock the one row they change (waiting, not skipping: a command must apply), so a claim
# and a command never interleave on one schedule.
LOCK_SCHEDULE = """
SELECT {columns} FROM {schema}.schedules WHERE schedule_id = $1 FOR UPDATE
"""

# Primary key: at most one row per schedule id. A deleted row is reused by a later create.
INSERT_SCHEDULE = """
INSERT INTO {schema}.schedules
       (schedule_id, definition, paused, pause_reason, paused_at, next_slot, next_fire_at, covered_until,
        cron_rules)
VALUES ($1, $2::json, $3, '', CASE WHEN $3 THEN $7::timestamptz END, $4, $5, $6, {cron_rules})
ON CONFLICT (schedule_id) DO UPDATE
   SET definition = EXCLUDED.definition, version = {schema}.schedules.version + 1,
       cron_rules = EXCLUDED.cron_rules,
       paused = EXCLUDED.paused, pause_reason = '', resume_at = NULL,
       paused_at = EXCLUDED.paused_at, resumed_at = NULL, resume_catch_up = false,
       next_slot = EXCLUDED.next_slot, next_fire_at = EXCLUDED.next_fire_at,
       covered_until = EXCLUDED.covered_until, deleted = false, updated_at = now()
 WHERE {schema}.schedules.deleted
RETURNING schedule_id
"""

# A definition stored by this version is read with this version's cron rules: a person chose it.
REPLACE_DEFINITION = """
UPDATE {schema}.schedules
   SET definition = $2::json, version = version + 1, next_slot = $3, next_fire_at = $4,
       covered_until = $5, cron_rules = {cron_rules}, updated_at = now()
 WHERE schedule_id = $1
"""

# The review (slotflow_ticker.cron_review): rows stored under older cron rules, a batch at a time.
# SKIP LOCKED: tickers reviewing at once take different rows, and a row a command holds is
# reviewed by a later pass. Deleted rows are never fired again, so they are not reviewed.
UNREVIEWED_SCHEDULES = """
SELECT schedule_id, definition::text AS definition, paused
  FROM {schema}.schedules
 WHERE cron_rules < {cron_rules} AND NOT deleted
 ORDER BY schedule_id
 FOR UPDATE SKIP LOCKED
 LIMIT $1
"""

# Marked in the transaction that paused the ones whose meaning changed: reviewed once.
MARK_REVIEWED = """
UPDATE {schema}.schedules SET cron_rules = {cron_rules} WHERE schedule_id = ANY($1::text[])
"""

SET_POSITION = """
UPDATE {schema}.schedules
   SET next_slot = $2, next_fire_at = $3, covered_until = $4, updated_at = now()
 WHERE schedule_id = $1
"""

# A pause's and a resume's stored times are the command's own instant ($4, $2: the clock once the
# row is held, the time its event carries), so the ticker's pause window and the api's timeline
# are the same interval.
PAUSE = """
UPDATE {schema}.schedules
   SET paused = true, pause_reason = $2, resume_at = $3,
       paused_at = CASE WHEN paused THEN paused_at ELSE $4 END,
       resumed_at = CASE WHEN paused THEN resumed_at ELSE NULL END, resume_catch_up = false,
       updated_at = now()
 WHERE schedule_id = $1
"""

# $3: whether the slots of this pause meet the misfire policy (catch up) or are all recorded as
# skipped (`paused`, the default): the claims read it with the pause window (planning.PauseWindow).
RESUME = """
UPDATE {schema}.schedules
   SET paused = false, resume_at = NULL, resumed_at = $2, resume_catch_up = $3, updated_at = now()
 WHERE schedule_id = $1 AND paused
"""

DELETE = """
UPDATE {schema}.schedules
   SET deleted = true, next_slot = NULL, next_fire_at = NULL, updated_at = now()
 WHERE schedule_id = $1
"""

# Primary key: StartTimer is idempotent on the timer id, whatever state an earlier one reached.
INSERT_TIMER = """
INSERT INTO {schema}.timers (timer_id, fire_at, action, trace_parent) VALUES ($1, $2, $3::jsonb, $4)
ON CONFLICT (timer_id) DO NOTHING
RETURNING timer_id
"""

# A polled batch of StartTimers in one statement; same key and same no-op on a repeated timer id.
# The caller passes each timer id once (the first command of the batch wins, as it would one by one).
INSERT_TIMERS = """
INSERT INTO {schema}.timers (timer_id, fire_at, action, trace_parent)
SELECT t.timer_id, t.fire_at, t.action::jsonb, t.trace_parent
  FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[]) AS t(timer_id, fire_at, action, trace_parent)
ON CONFLICT (timer_id) DO NOTHING
"""

# A polled batch of command ids recorded in the inbox at once (primary key: a redelivered command
# is recognised). Returns the ids that were new; only those are applied.
RECORD_COMMANDS = """
INSERT INTO {schema}.inbox (event_id, topic)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id
"""

# The same for the internal timer topic's command ids, in an inbox of their own (migration 0004):
# a public command may carry any id, and would otherwise take the predictable id of a claimer's or
# an orchestrator's timer command first, which would then be skipped as a redelivery.
RECORD_TIMER_COMMANDS = """
INSERT INTO {schema}.timer_inbox (event_id)
SELECT * FROM unnest($1::text[])
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id
"""

# Only a pending timer can be cancelled; a fired one has already had its effect.
CANCEL_TIMER = """
UPDATE {schema}.timers SET state = 'cancelled' WHERE timer_id = $1 AND state = 'pending'
RETURNING timer_id
"""

PURGE_INBOX = """
DELETE FROM {schema}.inbox WHERE processed_at < now() - make_interval(secs => $1)
"""

PURGE_TIMER_INBOX = """
DELETE FROM {schema}.timer_inbox WHERE processed_at < now() - make_interval(secs => $1)
"""

PURGE_TIMERS = """
DELETE FROM {schema}.timers WHERE state <> 'pending' AND created_at < now() - make_interval(secs => $1)
"""


# record_reruns --
# One re-run number per slot of an operator's RerunSlots, one above the highest the slot has had.
# The caller holds the schedule's row lock (lock_schedule), so two re-runs of one slot take their
# numbers one after the other; the primary key would refuse a number drawn twice anyway. A slot's
# numbers are never reused, so the forced re-run `{run id}#rerun-{n}` names one deliberate effect.
RECORD_RERUNS = """
INSERT INTO {schema}.slot_reruns
       (schedule_id, slot, number, forced, command_id, principal, reason, issued_at)
SELECT $1, w.slot,
       COALESCE((SELECT max(r.number) FROM {schema}.slot_reruns r
                  WHERE r.schedule_id = $1 AND r.slot = w.slot), 0) + 1,
       w.forced, $4, $5, $6, $7
  FROM unnest($2::timestamptz[], $3::bool[]) AS w(slot, forced)
RETURNING slot, number, forced
"""


@dataclass(frozen=True)
class Queries:
    """The statements above rendered for one schema (`slotflow.pg.statements.sql`)."""

    claim_due: str
    advance: str
    auto_resume: str
    claim_timers: str
    mark_timers_fired: str
    horizon_schedules: str
    horizon_timers: str
    horizon_schedules_after: str
    horizon_timers_after: str
    now: str
    locked_now: str
    lock_schedule: str
    insert_schedule: str
    replace_definition: str
    set_position: str
    pause: str
    resume: str
    delete: str
    insert_timer: str
    insert_timers: str
    record_commands: str
    record_timer_commands: str
    cancel_timer: str
    purge_inbox: str
    purge_timer_inbox: str
    purge_timers: str
    unreviewed_schedules: str
    mark_reviewed: str
    record_reruns: str

    @classmethod
    def for_schema(cls, schema: str) -> "Queries":
        def fill(statement: str) -> str:
            return sql(compose(statement, columns=_SCHEDULE_COLUMNS, cron_rules=str(CRON_RULES)), schema)

        return cls(
            claim_due=fill(CLAIM_DUE),
            advance=fill(ADVANCE),
            auto_resume=fill(AUTO_RESUME),
            claim_timers=fill(CLAIM_TIMERS),
            mark_timers_fired=fill(MARK_TIMERS_FIRED),
            horizon_schedules=fill(HORIZON_SCHEDULES),
            horizon_timers=fill(HORIZON_TIMERS),
            horizon_schedules_after=fill(HORIZON_SCHEDULES_AFTER),
            horizon_timers_after=fill(HORIZON_TIMERS_AFTER),
            now=NOW,
            locked_now=LOCKED_NOW,
            lock_schedule=fill(LOCK_SCHEDULE),
            insert_schedule=fill(INSERT_SCHEDULE),
            replace_definition=fill(REPLACE_DEFINITION),
            set_position=fill(SET_POSITION),
            pause=fill(PAUSE),
            resume=fill(RESUME),
            delete=fill(DELETE),
            insert_timer=fill(INSERT_TIMER),
            insert_timers=fill(INSERT_TIMERS),
            record_commands=fill(RECORD_COMMANDS),
            record_timer_commands=fill(RECORD_TIMER_COMMANDS),
            cancel_timer=fill(CANCEL_TIMER),
            purge_inbox=fill(PURGE_INBOX),
            purge_timer_inbox=fill(PURGE_TIMER_INBOX),
            purge_timers=fill(PURGE_TIMERS),
            unreviewed_schedules=fill(UNREVIEWED_SCHEDULES),
            mark_reviewed=fill(MARK_REVIEWED),
            record_reruns=fill(RECORD_RERUNS),
        )
