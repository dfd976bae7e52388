"""The statements the api's reads run over the read model (`slotflow_api.read_model`): every list
is a keyset page, each statement runs without locks in its own snapshot unless its comment says
otherwise. `{schema}` is the api's schema, quoted by `slotflow.pg.statements.sql`; `{where}` and
`{limit}` are filled at run time by `slotflow.pg.statements.sql_with` from a `Filters` (every value a
`$n` parameter), `{order}` with ASC or DESC.
"""

from slotflow.pg.statements import compose

# -- schedules ----------------------------------------------------------------------------------

_SCHEDULE_COLUMNS = (
    "schedule_id, definition, handler, paused, pause_reason, resume_at, tags, next_fire_at, "
    "created_at, updated_at, deleted, "
    # A one-shot is finished once its slot has a run or a recorded skip (slot equality: a manual
    # trigger's run, or a run of an earlier `at` the schedule was updated away from, does not count).
    "(definition->'spec'->>'kind' = 'once' AND ("
    "EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.job_id = s.schedule_id "
    "AND r.slot = (s.definition->'spec'->>'at')::timestamptz) OR "
    "EXISTS (SELECT 1 FROM {schema}.skipped_slots k WHERE k.schedule_id = s.schedule_id "
    "AND k.slot = (s.definition->'spec'->>'at')::timestamptz))) AS once_handled"
)


#: What a list of schedules needs to answer "is this healthy?": the newest run (by slot) and the
#: failure streak, the runs that ended dead-lettered or failed since the newest completed one
#: (runs still in flight and skipped ones neither break nor extend it). Both walk the
#: (job_id, slot) index backwards from the newest run, so a page costs one short scan per row.
_HEALTH_COLUMNS = (
    "last.run_id AS last_run_id, last.slot AS last_run_slot, last.state AS last_run_state, "
    "last.finished_at AS last_run_finished_at, "
    "(SELECT count(*) FROM {schema}.runs f WHERE f.job_id = s.schedule_id "
    "AND f.state IN ('dead_lettered', 'failed') AND f.slot > COALESCE((SELECT max(c.slot) "
    "FROM {schema}.runs c WHERE c.job_id = s.schedule_id AND c.state = 'completed'), "
    "'-infinity')) AS failure_streak"
)
_LAST_RUN_JOIN = (
    "LEFT JOIN LATERAL (SELECT r.run_id, r.slot, r.state, r.finished_at FROM {schema}.runs r "
    "WHERE r.job_id = s.schedule_id ORDER BY r.slot DESC, r.run_id DESC LIMIT 1) last ON true"
)

# Reads run without locks in their own statement; a page is a keyset range (`{where}` ends with
# the cursor's condition, `{limit}` asks one row more to learn whether a page follows).
SCHEDULES_PAGE = compose(
    "SELECT {columns}, {health} FROM {schema}.schedules s {joined} WHERE {where} "
    "ORDER BY schedule_id LIMIT {limit}",
    columns=_SCHEDULE_COLUMNS,
    health=_HEALTH_COLUMNS,
    joined=_LAST_RUN_JOIN,
)
SCHEDULE_BY_ID = compose(
    "SELECT {columns}, {health} FROM {schema}.schedules s {joined} WHERE schedule_id = $1",
    columns=_SCHEDULE_COLUMNS,
    health=_HEALTH_COLUMNS,
    joined=_LAST_RUN_JOIN,
)
# Every schedule not deleted, by id, at most $1 (the calendar's input).
LIVE_SCHEDULES = compose(
    "SELECT {columns} FROM {schema}.schedules s WHERE NOT deleted ORDER BY schedule_id LIMIT $1",
    columns=_SCHEDULE_COLUMNS,
)

# How many of a schedule's runs are in each state.
RUN_COUNTS_BY_STATE = "SELECT state, count(*) AS n FROM {schema}.runs WHERE job_id = $1 GROUP BY state"


# -- runs ---------------------------------------------------------------------------------------

_RUN_SELECT = """
SELECT r.*, COALESCE((
    SELECT json_agg(json_build_object(
        'attempt', a.attempt, 'fence_token', a.fence_token, 'owner', a.owner,
        'started_at', a.started_at, 'finished_at', a.finished_at, 'outcome', a.outcome,
        'error', a.error, 'retry_at', a.retry_at{detail}) ORDER BY a.fence_token, a.attempt)
      FROM {schema}.run_attempts a WHERE a.run_id = r.run_id), '[]') AS attempts
  FROM {schema}.runs r
"""
#: Only one run's page reads the tracebacks and log lines; lists of runs leave them out.
_ATTEMPT_DETAIL = ", 'traceback', a.traceback, 'logs', COALESCE(a.logs, '[]'::jsonb)"


# A page by slot, then run id (the cursor's key), in the asked direction; one run with detail; a
# workflow's activities in sequence order.
RUNS_PAGE = compose(
    "{run_select} WHERE {where} ORDER BY r.slot {order}, r.run_id {order} LIMIT {limit}",
    run_select=compose(_RUN_SELECT, detail=""),
)
RUN_BY_ID = compose(
    "{run_select} WHERE r.run_id = $1", run_select=compose(_RUN_SELECT, detail=_ATTEMPT_DETAIL)
)
WORKFLOW_ACTIVITIES = compose(
    "{run_select} WHERE r.workflow_id = $1 ORDER BY r.sequence, r.slot",
    run_select=compose(_RUN_SELECT, detail=""),
)

# The backfilled runs of a schedule in [start, end): the backfill route's progress.
# Every run of the schedule's slots in [start, end), whichever kind made it: a backfill's JobDue has
# the run id its slot always has (`{job}@{slot}`), so over a slot that already ran it collapses into
# that run and creates nothing. Forced re-runs (`#rerun-n`) have run ids of their own and are not
# among the slots' runs.
BACKFILL_RUN_STATES = "SELECT run_id, state FROM {schema}.runs WHERE job_id = $1 AND slot >= $2 AND slot < $3"


# -- workflows ----------------------------------------------------------------------------------

# Without typed history the newest activity run is the best guess at the current step.
_WORKFLOW_SELECT = """
SELECT w.workflow_id, w.workflow_type, w.input, w.status, w.cancel_requested, w.cancel_reason,
       w.requested_at, w.updated_at, w.last_sequence, w.started_at, w.ended_at, w.derived,
       w.rejection, w.waiting_for, w.waiting_since, w.memo, w.search_attributes,
       COALESCE(w.requested_at, w.updated_at) AS sort_at,
       CASE WHEN w.last_sequence IS NOT NULL THEN w.current_step ELSE
       (SELECT r.handler FROM {schema}.runs r WHERE r.workflow_id = w.workflow_id
         ORDER BY r.sequence DESC NULLS LAST, r.slot DESC LIMIT 1) END AS current_step
  FROM {schema}.workflows w
"""


# A page newest request first, then by id (the cursor's key); one workflow.
WORKFLOWS_PAGE = compose(
    "{workflow_select} WHERE {where} ORDER BY COALESCE(w.requested_at, w.updated_at) DESC, w.workflow_id DESC "
    "LIMIT {limit}",
    workflow_select=_WORKFLOW_SELECT,
)
WORKFLOW_BY_ID = compose("{workflow_select} WHERE w.workflow_id = $1", workflow_select=_WORKFLOW_SELECT)

# The attention filter: the workflows an operator should look at, one condition per reason, ORed
# (each `{}` is the age a wait must pass, on the database clock). A new reason is one more entry.
ATTENTION_REASONS = (
    # stuck: a replay diverged, and nothing moves until code matching its history is deployed
    "w.status = 'stuck'",
    # only a signal can move it (the fold's `waiting`), and none came for longer than the age
    "(w.waiting_for LIKE 'signal%' AND w.waiting_since < now() - {}::interval)",
    # waiting on a parked activity (a step of the fold's `steps` in state `parked`): the claimers
    # gave up on it, and only a person's retry (RetryActivity) moves it, so no age applies; a
    # closed workflow waits on nothing
    "(w.status IN ('running', 'compensating') AND EXISTS (SELECT 1 FROM "
    "jsonb_array_elements(w.derived -> 'steps') AS step WHERE step ->> 'state' = 'parked'))",
)


#: `ATTENTION_REASONS` as one condition of a list's filter.
ATTENTION = "(" + " OR ".join(ATTENTION_REASONS) + ")"


# -- a bulk cancel or terminate: the workflows a selection takes ----------------------------------

# The selected workflows, oldest request first, each with its status and whether a cancel was
# already requested. Read-only: the route publishes one command per workflow from this answer, and
# the orchestrator rejects a command to a workflow that ended since (a race costs a rejected
# command, never a second effect: cancel and terminate are idempotent on an ended workflow).
WORKFLOW_SELECTION = (
    "SELECT w.workflow_id, w.workflow_type, w.status, w.cancel_requested FROM {schema}.workflows w "
    "WHERE {where} ORDER BY COALESCE(w.requested_at, w.updated_at), w.workflow_id LIMIT {limit}"
)
# How many selected workflows are in each status (what the preview says it leaves out and why).
WORKFLOW_SELECTION_COUNTS = (
    "SELECT w.status, w.cancel_requested, count(*) AS n FROM {schema}.workflows w WHERE {where} "
    "GROUP BY w.status, w.cancel_requested"
)
# Which of the named ids the read model knows (the others are left out: nothing says they exist).
KNOWN_WORKFLOW_IDS = "SELECT workflow_id FROM {schema}.workflows WHERE workflow_id = ANY($1::text[])"

# One workflow's typed history events in sequence order: the input of the fold of one earlier run
# (a handle's, `?start_command_id=`) when the row shows a newer run of a reused id. The same rows
# the projection folds the row from, so the earlier run reads as it was shown while it was newest.
WORKFLOW_EVENTS_OF_ONE = (
    "SELECT type, version, at, data FROM {schema}.workflow_events WHERE workflow_id = $1 ORDER BY sequence"
)

# How many history entries a workflow has.
WORKFLOW_HISTORY_LENGTH = "SELECT count(*) FROM {schema}.workflow_history WHERE workflow_id = $1"

# The timers a workflow without typed history set through the ticker (TimerFired to the workflow),
# by fire time: what its page shows until its history is typed.
TICKER_TIMERS_OF = (
    "SELECT * FROM {schema}.timers WHERE owner = $1 AND action = 'timer_fired' ORDER BY fire_at, timer_id"
)

# Events recorded in the same instant keep their history order (sequence), not the id's text order.
WORKFLOW_HISTORY_PAGE = """
SELECT *, COALESCE(sequence, 0) AS position FROM {schema}.workflow_history WHERE {where}
 ORDER BY at, COALESCE(sequence, 0), entry_id LIMIT {limit}
"""


# -- dead letters and commands ------------------------------------------------------------------

# A dead letter with who last redrove or discarded it (`changed_by`: the principal of the command
# that changed it, when the api published that command and the command has been projected).
_DEAD_LETTER_SELECT = (
    "SELECT d.*, c.principal AS changed_by FROM {schema}.dead_letters d "
    "LEFT JOIN {schema}.commands c ON c.command_id = d.command_id"
)
# A page newest status change first, then by id (the cursor's key). The filters name the dead
# letter's own columns, so they apply to the joined row as a whole.
DEAD_LETTERS_PAGE = compose(
    "SELECT * FROM ({dead_letter_select}) x WHERE {where} ORDER BY status_at DESC, dead_letter_id DESC "
    "LIMIT {limit}",
    dead_letter_select=_DEAD_LETTER_SELECT,
)

# How many letters a selection (`{where}`) holds: those a redrive or discard takes, and the
# workflows' parked activities among them (a bulk redrive leaves them out: `$1`).
DEAD_LETTER_SELECTION_COUNTS = """
SELECT count(*) FILTER (WHERE NOT ($1::boolean AND workflow_id IS NOT NULL)) AS taken,
       count(*) FILTER (WHERE $1::boolean AND workflow_id IS NOT NULL) AS left_out
  FROM {schema}.dead_letters WHERE {where}
"""
# The letters a redrive or discard takes, in the order the dlq takes them (oldest first), at most
# `{limit}` (the command's own limit: what it would touch).
DEAD_LETTER_SELECTION_TAKEN = """
SELECT * FROM {schema}.dead_letters
 WHERE {where} AND NOT ($1::boolean AND workflow_id IS NOT NULL)
 ORDER BY first_seen, dead_letter_id LIMIT {limit}
"""

# One dead letter by its primary key.
DEAD_LETTER_BY_ID = compose(
    "{dead_letter_select} WHERE d.dead_letter_id = $1", dead_letter_select=_DEAD_LETTER_SELECT
)

# One command by its primary key (its status, the acknowledgement's reason).
COMMAND_BY_ID = "SELECT * FROM {schema}.commands WHERE command_id = $1"

# A page newest publication first, then by id (the cursor's key, index commands_by_publication).
# Rows only acknowledged so far (the command itself not projected yet) have no publication time
# and wait until it is.
COMMANDS_PAGE = (
    "SELECT command_id, command_type, subject, status, reason, principal, source, published_at, "
    "acknowledged_at FROM {schema}.commands WHERE published_at IS NOT NULL AND {where} "
    "ORDER BY published_at DESC, command_id DESC LIMIT {limit}"
)


# -- claimers and the clock ---------------------------------------------------------------------

# A claimer is live while its newest announcement is younger than three of its intervals, by the
# database clock.
LIST_CLAIMERS = (
    "SELECT claimer_id, handlers, interval_ms, started_at, announced_at, "
    "announced_at > now() - make_interval(secs => 3 * interval_ms / 1000.0) AS live "
    "FROM {schema}.claimers ORDER BY claimer_id"
)

# The database clock, which every decision about time uses (never a host's clock).
DATABASE_NOW = "SELECT now()"


# -- audit inputs -------------------------------------------------------------------------------

# The audit's inputs: the schedule's timeline in the order its changes happened, its runs and
# skipped slots in [start, end).
# A schedule's changes in [$2, $3) with who asked for each: the ticker names each change event
# `<command id>/<change>` (`fit_id`; `#paused` added for a create that starts paused), so the
# command, and its principal, is found by cutting that suffix off. A change whose command id was
# too long to keep whole in the event id finds no command: `by` is then null.
SCHEDULE_CHANGES_OF = """
SELECT t.at, t.change, c.command_id, c.principal
  FROM {schema}.schedule_timeline t
  LEFT JOIN {schema}.commands c
    ON c.command_id = regexp_replace(t.event_id, '/(created|updated|paused|resumed|deleted)(#paused)?$', '')
 WHERE t.schedule_id = $1 AND t.at >= $2 AND t.at < $3
 ORDER BY t.at, t.position, t.event_id
"""

# The schedule's whole timeline in the order its changes happened (the audit needs the definition
# in force at each slot, set before the range too).
SCHEDULE_TIMELINE_OF = (
    "SELECT at, change, definition FROM {schema}.schedule_timeline WHERE schedule_id = $1 "
    "ORDER BY at, position, event_id"
)

#: Each run's completing fence tokens: two tokens are one run's effect happening twice.
RUNS_IN_RANGE = """
SELECT r.run_id, r.slot, r.kind, r.state, r.produced_at, r.fire_at, r.completions, r.finished_at,
       COALESCE((SELECT array_agg(a.fence_token ORDER BY a.fence_token) FROM {schema}.run_attempts a
                  WHERE a.run_id = r.run_id AND a.completed), '{}') AS tokens,
       -- a run that waited for a downstream is judged by when it completed (audit `held`/`late`)
       EXISTS (SELECT 1 FROM {schema}.run_attempts a
                WHERE a.run_id = r.run_id AND a.outcome = 'held') AS was_held,
       r.error->>'held_reason' AS held_reason
  FROM {schema}.runs r WHERE r.job_id = $1 AND r.slot >= $2 AND r.slot < $3
"""

# The slots of the schedule the ticker recorded as skipped in [$2, $3), with why.
SKIPPED_IN_RANGE = (
    "SELECT slot, run_id, reason, detail FROM {schema}.skipped_slots "
    "WHERE schedule_id = $1 AND slot >= $2 AND slot < $3"
)

# An operator's re-runs and marks of the schedule's slots in [start, end), oldest first.
REPAIRS_IN_RANGE = """
SELECT slot, at, action, run_id, principal, reason FROM {schema}.slot_repairs
 WHERE schedule_id = $1 AND slot >= $2 AND slot < $3
 ORDER BY at, event_id, slot
"""


# -- backfills in flight ------------------------------------------------------------------------

#: A schedule's backfills still in flight, leaving out ``$2`` (a client retrying its own command).
#: In flight: not rejected, and not answered by the ticker yet, or accepted less than 10 s ago
#: (its JobDues travel on another topic than its acceptance, so the projector may show its runs a
#: little later), or with a run of its range not finished. The api takes the schedule's advisory
#: lock (`LOCK_BACKFILLS`) around this count and the row `RECORD_BACKFILL` writes, so two requests
#: cannot both pass on the same count.
COUNT_BACKFILLS_IN_FLIGHT = """
SELECT count(*) FROM {schema}.commands c
 WHERE c.subject = $1 AND c.range_start IS NOT NULL AND c.command_id <> $2
   AND c.status <> 'rejected'
   AND (c.status <> 'accepted' OR c.acknowledged_at > now() - interval '10 seconds' OR EXISTS (
        SELECT 1 FROM {schema}.runs r
         WHERE r.job_id = c.subject AND r.slot >= c.range_start AND r.slot < c.range_end
           AND r.state NOT IN ('completed', 'dead_lettered', 'skipped')
           -- a run cancelled by a newer one (cancel_previous) ends on its RunFailed
           AND NOT (r.state = 'failed' AND r.error->>'type' = 'RunCancelled')))
"""

#: One backfill request at a time per schedule (per database: every api replica agrees).
LOCK_BACKFILLS = "SELECT pg_advisory_xact_lock(hashtextextended('slotflow.api.backfills:' || $1, 0))"

#: The published Backfill, counted at once: the projector sees it on its topic only later, and
#: fills in the rest of the row (its source, when it was published, the ticker's answer).
RECORD_BACKFILL = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, range_start, range_end)
VALUES ($1, 'schedule.backfill', $2, 'pending', $3, $4)
ON CONFLICT (command_id) DO UPDATE SET
    range_start = COALESCE(commands.range_start, EXCLUDED.range_start),
    range_end = COALESCE(commands.range_end, EXCLUDED.range_end)
"""


# -- downstreams --------------------------------------------------------------------------------

_DOWNSTREAM_COLUMNS = (
    "name, state, manual, settings::text AS settings, held, window_seconds, first_attempts, retries, "
    "retry_allowance, successes, failures, changed_at, reported_at"
)
# What the claimers last reported of each downstream (a projection of their events).
LIST_DOWNSTREAMS = compose(
    "SELECT {columns} FROM {schema}.downstreams ORDER BY name", columns=_DOWNSTREAM_COLUMNS
)
DOWNSTREAM_BY_NAME = compose(
    "SELECT {columns} FROM {schema}.downstreams WHERE name = $1", columns=_DOWNSTREAM_COLUMNS
)
# The newest 50 changes of one downstream's circuit, newest first.
DOWNSTREAM_CHANGES = (
    "SELECT from_state, to_state, cause, reason, manual, by_claimer, command_id, held, at "
    "FROM {schema}.downstream_changes WHERE name = $1 ORDER BY at DESC, event_id DESC LIMIT 50"
)
# Which downstream a held run waits for: its reason names it after the colon ("circuit_open:bank-api").
_HELD_FOR = "substr(r.error->>'held_reason', strpos(r.error->>'held_reason', ':') + 1)"
# How many runs the read model holds as held, per downstream: the same rows HELD_RUNS lists, so
# a count shown beside them is theirs (the claimers' reported `held` is another moment's figure:
# a header of 8 above 9 rows).
HELD_COUNTS = compose(
    """
SELECT {held_for} AS name, count(*) AS n
  FROM {schema}.runs r
 WHERE r.state = 'held'
 GROUP BY 1
""",
    held_for=_HELD_FOR,
)
# The runs held for downstream $1, in slot order: a held run names its downstream after the colon
# of its reason ("circuit_open:bank-api").
HELD_RUNS = """
SELECT r.run_id, r.job_id, r.slot, r.attempt, r.error->>'held_reason' AS held_reason,
       (SELECT max(a.retry_at) FROM {schema}.run_attempts a WHERE a.run_id = r.run_id) AS retry_at
  FROM {schema}.runs r
 WHERE r.state = 'held'
   AND substr(r.error->>'held_reason', strpos(r.error->>'held_reason', ':') + 1) = $1
 ORDER BY r.slot, r.job_id LIMIT 100
"""


# -- readiness ----------------------------------------------------------------------------------

# `/readyz`: the database answers a statement (under the probe's timeout); nothing is read or locked.
READINESS_PROBE = "SELECT 1"
