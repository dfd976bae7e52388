"""The statements that build the read model: the projection of each fact (`slotflow_api.projection`),
the fold of a workflow's history (`slotflow_api.workflow_projection`), and the projector's group and
rebuild (`slotflow_api.projector`). `{schema}` is the api's schema, quoted by
`slotflow.pg.statements.sql`.

Facts about one key arrive in order (one partition); facts about one run or timer come from several
topics in any order, so their statements merge with monotone rules and the result never depends on
the arrival order (the module docstring of `slotflow_api.projection`).
"""

# -- the dedupe ---------------------------------------------------------------------------------

# The dedupe: (topic, event id) is the primary key of `seen`, so a fact redelivered or read
# again by a rebuild is projected once; only the ids this statement inserted are applied.
RECORD_SEEN = (
    "INSERT INTO {schema}.seen (topic, event_id) SELECT * FROM unnest($1::text[], $2::text[]) "
    "ON CONFLICT DO NOTHING RETURNING topic, event_id"
)


# -- slots skipped and repaired ---------------------------------------------------------------

# One row per (schedule, slot) (primary key): a SlotSkipped seen again adds nothing.
INSERT_SKIPPED_SLOT = (
    "INSERT INTO {schema}.skipped_slots (schedule_id, slot, run_id, reason, detail, at) "
    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
)

# One row per (event, slot) (primary key): a SlotsRerun or SlotsMarked seen again adds nothing.
INSERT_SLOT_REPAIRS = """
INSERT INTO {schema}.slot_repairs (schedule_id, slot, event_id, at, action, run_id, number, principal, reason)
SELECT $1, r.slot, $2, $3, r.action, r.run_id, r.number, $4, $5
  FROM unnest($6::timestamptz[], $7::text[], $8::text[], $9::int[]) AS r(slot, action, run_id, number)
ON CONFLICT DO NOTHING
"""


# -- runs ---------------------------------------------------------------------------------------

# The skeleton exists so the derived update below has a row to land on; the JobDue fills in
# what only it knows (kind, handler, tags), whichever arrives first: every field keeps its first
# known value, so the order the facts arrive in changes nothing.
UPSERT_RUN_SKELETON = """
INSERT INTO {schema}.runs (run_id, job_id, slot, workflow_id, sequence, kind, handler, tags,
    payload, state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, 'due')
ON CONFLICT (run_id) DO UPDATE SET
    kind = COALESCE(runs.kind, EXCLUDED.kind),
    payload = COALESCE(runs.payload, EXCLUDED.payload),
    handler = COALESCE(runs.handler, EXCLUDED.handler),
    tags = CASE WHEN cardinality(runs.tags) = 0 THEN EXCLUDED.tags ELSE runs.tags END,
    workflow_id = COALESCE(runs.workflow_id, EXCLUDED.workflow_id),
    sequence = COALESCE(runs.sequence, EXCLUDED.sequence)
"""


# One row per (run, attempt) (primary key): each attempt's JobDue, kept once.
INSERT_RUN_DUE = (
    "INSERT INTO {schema}.run_dues (run_id, attempt, kind, due_at, produced_at, fire_at) "
    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"
)


# One row per claim (run, fence token, attempt); its facts merge monotonically (highest rank,
# earliest start, latest finish, first result), so any arrival order gives the same row.
MERGE_RUN_ATTEMPT = """
INSERT INTO {schema}.run_attempts AS a (run_id, attempt, fence_token, owner, outcome, rank,
    completed, started_at, finished_at, retry_at, error, result, traceback, logs)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12::jsonb, $13, $14::jsonb)
ON CONFLICT (run_id, fence_token, attempt) DO UPDATE SET
    outcome = CASE WHEN EXCLUDED.rank > a.rank THEN EXCLUDED.outcome ELSE a.outcome END,
    rank = GREATEST(a.rank, EXCLUDED.rank),
    completed = a.completed OR EXCLUDED.completed,
    started_at = LEAST(a.started_at, EXCLUDED.started_at),
    finished_at = GREATEST(a.finished_at, EXCLUDED.finished_at),
    retry_at = GREATEST(a.retry_at, EXCLUDED.retry_at),
    -- failure and dead-letter facts carry disjoint keys: the merge commutes
    error = CASE WHEN a.error IS NULL THEN EXCLUDED.error
                 WHEN EXCLUDED.error IS NULL THEN a.error
                 ELSE a.error || EXCLUDED.error END,
    result = COALESCE(a.result, EXCLUDED.result),
    -- one claim ends in one RunFailed or RunCompleted: the first that carries them
    traceback = COALESCE(a.traceback, EXCLUDED.traceback),
    logs = COALESCE(a.logs, EXCLUDED.logs)
"""

# A claim whose lease lapsed was taken over under a higher fence token: its owner's late writes
# bounce, so it never reports an outcome and would show `running` forever. Any higher token on the
# run settles it as `taken_over` (rank stays 1: a fact it did report before the takeover still
# outranks it, whatever order the facts arrive in).
MARK_TAKEN_OVER = """
UPDATE {schema}.run_attempts AS a SET outcome = 'taken_over'
 WHERE a.run_id = ANY($1::text[]) AND a.outcome = 'running'
   AND EXISTS (SELECT 1 FROM {schema}.run_attempts b WHERE b.run_id = a.run_id AND b.fence_token > a.fence_token)
"""

# A run's state is a function of all its facts, never of their arrival order: completed anywhere
# wins; otherwise the latest claim (highest fence token, then attempt) speaks, unless a JobDue for
# a later attempt has arrived and nobody has claimed it yet.
DERIVE_RUNS = """
WITH latest AS (
    SELECT DISTINCT ON (run_id) run_id, attempt, fence_token, owner, outcome
      FROM {schema}.run_attempts WHERE run_id = ANY($1::text[])
     ORDER BY run_id, fence_token DESC, attempt DESC
), facts AS (
    SELECT run_id,
           min(started_at) AS started_at,
           max(finished_at) AS finished_at,
           count(*) FILTER (WHERE completed) AS completions,
           (array_agg(result ORDER BY fence_token, attempt) FILTER (WHERE completed))[1] AS result,
           (array_agg(error ORDER BY fence_token DESC, attempt DESC) FILTER (WHERE error IS NOT NULL))[1] AS error
      FROM {schema}.run_attempts WHERE run_id = ANY($1::text[]) GROUP BY run_id
), dues AS (
    SELECT run_id, max(attempt) AS due_attempt,
           (array_agg(due_at ORDER BY attempt))[1] AS due_at,
           (array_agg(produced_at ORDER BY attempt))[1] AS produced_at,
           (array_agg(fire_at ORDER BY attempt))[1] AS fire_at
      FROM {schema}.run_dues WHERE run_id = ANY($1::text[]) GROUP BY run_id
)
UPDATE {schema}.runs AS r SET
    state = CASE
        WHEN facts.completions > 0 THEN 'completed'
        WHEN latest.run_id IS NULL THEN 'due'
        WHEN dues.due_attempt > latest.attempt THEN 'due'
        ELSE latest.outcome END,
    attempt = GREATEST(COALESCE(latest.attempt, 0), COALESCE(dues.due_attempt, 0)),
    fence_token = latest.fence_token,
    owner = latest.owner,
    due_at = dues.due_at,
    produced_at = dues.produced_at,
    fire_at = dues.fire_at,
    started_at = facts.started_at,
    finished_at = facts.finished_at,
    result = facts.result,
    -- A completed run's outcome is its result: the errors of the attempts before it stay on
    -- those attempts (run_attempts), not on the run.
    error = CASE WHEN facts.completions > 0 THEN NULL ELSE facts.error END,
    completions = COALESCE(facts.completions, 0)
FROM (SELECT unnest($1::text[]) AS run_id) AS t
LEFT JOIN latest ON latest.run_id = t.run_id
LEFT JOIN facts ON facts.run_id = t.run_id
LEFT JOIN dues ON dues.run_id = t.run_id
WHERE r.run_id = t.run_id
"""


# -- schedules ----------------------------------------------------------------------------------

# A schedule's events arrive in record order (one partition per schedule id), so each applies as
# it comes; a create takes over whatever a deleted schedule of the same id left.
UPSERT_CREATED_SCHEDULE = """
INSERT INTO {schema}.schedules (schedule_id, definition, handler, tags, paused, next_fire_at,
    deleted, created_at, updated_at)
VALUES ($1, $2::jsonb, $3, $4, $5, $6, false, $7, $7)
ON CONFLICT (schedule_id) DO UPDATE SET definition = EXCLUDED.definition,
    handler = EXCLUDED.handler, tags = EXCLUDED.tags, paused = EXCLUDED.paused,
    pause_reason = NULL, resume_at = NULL, next_fire_at = EXCLUDED.next_fire_at,
    deleted = false, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
"""

# An update replaces the definition and what follows from it (handler, tags, next fire time).
UPDATE_SCHEDULE_DEFINITION = (
    "UPDATE {schema}.schedules SET definition = $2::jsonb, handler = $3, tags = $4, "
    "next_fire_at = $5, updated_at = $6 WHERE schedule_id = $1"
)

# Pause, resume and delete apply in record order too (one partition per schedule id).
PAUSE_SCHEDULE = (
    "UPDATE {schema}.schedules SET paused = true, pause_reason = $2, resume_at = $3, "
    "updated_at = $4 WHERE schedule_id = $1"
)
RESUME_SCHEDULE = (
    "UPDATE {schema}.schedules SET paused = false, pause_reason = NULL, resume_at = NULL, "
    "next_fire_at = $2, updated_at = $3 WHERE schedule_id = $1"
)
# A delete keeps the row, marked: a list shows deleted schedules when asked, and a later create of
# the same id takes the row over (UPSERT_CREATED_SCHEDULE).
MARK_SCHEDULE_DELETED = (
    "UPDATE {schema}.schedules SET deleted = true, next_fire_at = NULL, updated_at = $2 "
    "WHERE schedule_id = $1"
)

# One row per (schedule, event id) (primary key): an event read again adds nothing; `position`
# (the record offset) orders the changes of one instant.
INSERT_TIMELINE_CHANGE = (
    "INSERT INTO {schema}.schedule_timeline (schedule_id, event_id, position, at, change, definition) "
    "VALUES ($1, $2, $3, $4, $5, $6::jsonb) ON CONFLICT DO NOTHING"
)


# -- claimers -----------------------------------------------------------------------------------

# The newest announcement wins whatever order a rebuild reads them in (one partition: in order).
UPSERT_CLAIMER = """
INSERT INTO {schema}.claimers AS c (claimer_id, handlers, interval_ms, started_at, announced_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (claimer_id) DO UPDATE SET handlers = EXCLUDED.handlers,
    interval_ms = EXCLUDED.interval_ms, started_at = EXCLUDED.started_at,
    announced_at = EXCLUDED.announced_at
WHERE EXCLUDED.announced_at >= c.announced_at
"""


# -- downstreams --------------------------------------------------------------------------------

# One row per change event: a redelivered event collapses on its id.
INSERT_DOWNSTREAM_CHANGE = """
INSERT INTO {schema}.downstream_changes (event_id, name, from_state, to_state, cause, reason,
    manual, by_claimer, command_id, held, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (event_id) DO NOTHING
"""

# A change is newer than any report taken before it (the same clock): it sets the state; an
# older fact never overwrites a newer one, so arrival order does not matter.
UPSERT_DOWNSTREAM_CHANGED = """
INSERT INTO {schema}.downstreams AS d (name, state, manual, settings, held, changed_at, fact_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $6)
ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, manual = EXCLUDED.manual,
    settings = EXCLUDED.settings, held = EXCLUDED.held, changed_at = EXCLUDED.changed_at,
    fact_at = EXCLUDED.fact_at
WHERE EXCLUDED.fact_at >= d.fact_at
"""

# The latest report of a downstream, unless a newer fact (change or report) is already there.
UPSERT_DOWNSTREAM_REPORTED = """
INSERT INTO {schema}.downstreams AS d (name, state, manual, settings, held, window_seconds,
    first_attempts, retries, retry_allowance, successes, failures, changed_at, reported_at, fact_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13)
ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, manual = EXCLUDED.manual,
    settings = EXCLUDED.settings, held = EXCLUDED.held, window_seconds = EXCLUDED.window_seconds,
    first_attempts = EXCLUDED.first_attempts, retries = EXCLUDED.retries,
    retry_allowance = EXCLUDED.retry_allowance, successes = EXCLUDED.successes,
    failures = EXCLUDED.failures, changed_at = EXCLUDED.changed_at,
    reported_at = EXCLUDED.reported_at, fact_at = EXCLUDED.fact_at
WHERE EXCLUDED.fact_at >= d.fact_at
"""


# -- commands -----------------------------------------------------------------------------------

# A command and its acknowledgement come from different topics, in either order: the command
# fills blanks, and an acknowledgement projected first stays final.
UPSERT_COMMAND_SEEN = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, source, published_at,
                               range_start, range_end, principal)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (command_id) DO UPDATE SET
    principal = EXCLUDED.principal,
    command_type = COALESCE(commands.command_type, EXCLUDED.command_type),
    subject = COALESCE(commands.subject, EXCLUDED.subject),
    range_start = COALESCE(commands.range_start, EXCLUDED.range_start),
    range_end = COALESCE(commands.range_end, EXCLUDED.range_end),
    source = EXCLUDED.source, published_at = EXCLUDED.published_at,
    -- an acknowledgement projected first is final: the command itself only fills blanks
    status = CASE WHEN commands.status IN ('accepted', 'rejected') THEN commands.status
                  ELSE EXCLUDED.status END
"""

# The acknowledgement sets the status and the reason; type and subject only fill blanks.
UPSERT_ACKNOWLEDGED = """
INSERT INTO {schema}.commands (command_id, command_type, subject, status, reason, acknowledged_at, summary)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (command_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason,
    acknowledged_at = EXCLUDED.acknowledged_at,
    command_type = COALESCE(commands.command_type, EXCLUDED.command_type),
    subject = COALESCE(commands.subject, EXCLUDED.subject),
    summary = COALESCE(EXCLUDED.summary, commands.summary)
"""

# The dlq service names the command that redrove or discarded an entry: that is its acceptance
# (the earliest acknowledgement time stays).
UPSERT_ACCEPTED_BY_DLQ = """
INSERT INTO {schema}.commands (command_id, status, acknowledged_at) VALUES ($1, 'accepted', $2)
ON CONFLICT (command_id) DO UPDATE SET status = 'accepted',
    acknowledged_at = LEAST(commands.acknowledged_at, EXCLUDED.acknowledged_at)
"""


# -- dead letters -------------------------------------------------------------------------------

# Ordered per dead letter id (its partition): the newest status event is the truth; a field it
# leaves empty keeps what an earlier one said.
UPSERT_DEAD_LETTER = """
INSERT INTO {schema}.dead_letters (dead_letter_id, status, reason, topic, source_service, partition,
    "offset", key, job_id, run_id, original_type, error_type, error, tags, count, redrive_count,
    first_seen, last_seen, status_at, note, command_id, redrive_of, workflow_id, sequence, redrive_target)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20, $21, $22, $23, $24, $25)
ON CONFLICT (dead_letter_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason,
    topic = EXCLUDED.topic, source_service = EXCLUDED.source_service,
    partition = COALESCE(EXCLUDED.partition, dead_letters.partition),
    "offset" = COALESCE(EXCLUDED."offset", dead_letters."offset"),
    key = COALESCE(EXCLUDED.key, dead_letters.key),
    job_id = COALESCE(EXCLUDED.job_id, dead_letters.job_id),
    run_id = COALESCE(EXCLUDED.run_id, dead_letters.run_id),
    original_type = COALESCE(EXCLUDED.original_type, dead_letters.original_type),
    error_type = CASE WHEN EXCLUDED.error_type = '' THEN dead_letters.error_type ELSE EXCLUDED.error_type END,
    error = CASE WHEN EXCLUDED.error = '' THEN dead_letters.error ELSE EXCLUDED.error END,
    tags = CASE WHEN cardinality(EXCLUDED.tags) = 0 THEN dead_letters.tags ELSE EXCLUDED.tags END,
    count = EXCLUDED.count, redrive_count = EXCLUDED.redrive_count,
    first_seen = COALESCE(dead_letters.first_seen, EXCLUDED.first_seen),
    last_seen = COALESCE(EXCLUDED.last_seen, dead_letters.last_seen),
    status_at = EXCLUDED.status_at, note = EXCLUDED.note,
    command_id = COALESCE(EXCLUDED.command_id, dead_letters.command_id),
    redrive_of = COALESCE(EXCLUDED.redrive_of, dead_letters.redrive_of),
    workflow_id = COALESCE(EXCLUDED.workflow_id, dead_letters.workflow_id),
    sequence = COALESCE(EXCLUDED.sequence, dead_letters.sequence),
    redrive_target = COALESCE(EXCLUDED.redrive_target, dead_letters.redrive_target)
"""


# -- timers and workflows -----------------------------------------------------------------------

# A timer's facts (StartTimer, CancelTimer, TimerFired) come from two topics in any order: the
# status of the highest rank wins (TIMER_RANKS) and every other field keeps its first known value.
MERGE_TIMER = """
INSERT INTO {schema}.timers AS t (timer_id, owner, action, sequence, fire_at, status, rank, fired_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (timer_id) DO UPDATE SET
    owner = CASE WHEN t.owner = '' THEN EXCLUDED.owner ELSE t.owner END,
    action = CASE WHEN t.action = 'unknown' THEN EXCLUDED.action ELSE t.action END,
    sequence = COALESCE(t.sequence, EXCLUDED.sequence),
    fire_at = COALESCE(t.fire_at, EXCLUDED.fire_at),
    status = CASE WHEN EXCLUDED.rank > t.rank THEN EXCLUDED.status ELSE t.status END,
    rank = GREATEST(t.rank, EXCLUDED.rank),
    fired_at = COALESCE(t.fired_at, EXCLUDED.fired_at)
"""

# A workflow command only fills blanks and widens the times (earliest request, latest update):
# the history, folded into the same row (workflow_projection), speaks for the rest. A cancel
# request sticks, with its first reason.
UPSERT_WORKFLOW_REQUESTED = """
INSERT INTO {schema}.workflows (workflow_id, workflow_type, input, status, requested_at, updated_at, memo,
    search_attributes)
VALUES ($1, $2, $3::jsonb, 'requested', $4, $4, $5::jsonb, $6::jsonb)
ON CONFLICT (workflow_id) DO UPDATE SET
    workflow_type = COALESCE(workflows.workflow_type, EXCLUDED.workflow_type),
    input = COALESCE(workflows.input, EXCLUDED.input),
    memo = COALESCE(workflows.memo, EXCLUDED.memo),
    search_attributes = COALESCE(workflows.search_attributes, EXCLUDED.search_attributes),
    requested_at = LEAST(workflows.requested_at, EXCLUDED.requested_at),
    updated_at = GREATEST(workflows.updated_at, EXCLUDED.updated_at)
"""


# A cancel marks a workflow the api knows; it never makes a row: commands of one workflow share a
# partition, so its StartWorkflow (or its history's fold) is projected first, and a cancel of an
# id that never started is the orchestrator's to reject (its command row says why).
MARK_WORKFLOW_CANCEL = """
UPDATE {schema}.workflows SET cancel_requested = true,
    cancel_reason = COALESCE(cancel_reason, $2),
    updated_at = GREATEST(updated_at, $3)
 WHERE workflow_id = $1
"""


# A refused StartWorkflow: the row it made says `rejected` with the reason while no history exists
# (the orchestrator's answer and the command come from two topics, in either order: this fills a
# row the command has not made yet, and the command never overwrites a status). History, folded
# into the row, speaks for the workflow once there (a duplicate start's refusal of a running
# workflow changes nothing; `workflow_projection` clears the rejection).
UPSERT_WORKFLOW_START_REJECTED = """
INSERT INTO {schema}.workflows (workflow_id, status, rejection, updated_at)
VALUES ($1, 'rejected', $2, $3)
ON CONFLICT (workflow_id) DO UPDATE SET
    status = CASE WHEN workflows.last_sequence IS NULL THEN 'rejected' ELSE workflows.status END,
    rejection = CASE WHEN workflows.last_sequence IS NULL THEN EXCLUDED.rejection ELSE NULL END,
    updated_at = GREATEST(workflows.updated_at, EXCLUDED.updated_at)
"""

# One row per (workflow, entry id) (primary key): the entry id names the topic and the fact's
# dedupe id, so a fact is listed once however often it arrives.
INSERT_HISTORY_ENTRY = (
    "INSERT INTO {schema}.workflow_history (workflow_id, entry_id, at, origin, type, sequence, data, "
    "version) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8) ON CONFLICT DO NOTHING"
)


# -- a workflow's typed history, folded (workflow_projection) -------------------------------------

# One row per (workflow, sequence) (primary key): the first event at a sequence stays, so the
# fold reads one history however often, and in whatever batches, its events arrive.
INSERT_WORKFLOW_EVENT = (
    "INSERT INTO {schema}.workflow_events (workflow_id, sequence, event_id, type, version, at, data) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT DO NOTHING"
)

# Every recorded event of the workflows, in sequence order: the fold's whole input.
WORKFLOW_EVENTS_OF = (
    "SELECT workflow_id, type, version, at, data FROM {schema}.workflow_events "
    "WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, sequence"
)

# The history speaks for the workflow's type and input, its memo and search attributes (the
# fold's, so what a query finds is what the history says); a StartWorkflow command (another
# topic, projected in any order) only fills blanks, so both orders give the same row. A row with
# history was not rejected (a refusal of a later duplicate start is not the workflow's).
STORE_WORKFLOW_STATE = """
INSERT INTO {schema}.workflows AS w (workflow_id, workflow_type, input, status, cancel_requested,
    cancel_reason, requested_at, updated_at, current_step, last_sequence, started_at, ended_at, derived,
    waiting_for, waiting_since, memo, search_attributes)
VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10, $7, $11, $12::jsonb, $13, $14, $15::jsonb, $16::jsonb)
ON CONFLICT (workflow_id) DO UPDATE SET
    memo = EXCLUDED.memo,
    search_attributes = EXCLUDED.search_attributes,
    rejection = NULL,
    waiting_for = EXCLUDED.waiting_for,
    waiting_since = EXCLUDED.waiting_since,
    workflow_type = COALESCE(EXCLUDED.workflow_type, w.workflow_type),
    input = COALESCE(EXCLUDED.input, w.input),
    status = EXCLUDED.status,
    cancel_requested = w.cancel_requested OR EXCLUDED.cancel_requested,
    cancel_reason = COALESCE(w.cancel_reason, EXCLUDED.cancel_reason),
    requested_at = LEAST(w.requested_at, EXCLUDED.requested_at),
    updated_at = GREATEST(w.updated_at, EXCLUDED.updated_at),
    current_step = EXCLUDED.current_step,
    last_sequence = EXCLUDED.last_sequence,
    started_at = EXCLUDED.started_at,
    ended_at = EXCLUDED.ended_at,
    derived = EXCLUDED.derived
"""


# -- the projector's group and a rebuild (projector) ----------------------------------------------

# projector_state holds one row (`singleton` is its primary key): the first projector to start
# names the group, and every later one reads that name.
CLAIM_PROJECTOR_GROUP = (
    "INSERT INTO {schema}.projector_state (singleton, group_id) VALUES (true, $1) ON CONFLICT DO NOTHING"
)
CURRENT_PROJECTOR_GROUP = "SELECT group_id FROM {schema}.projector_state"
# A batch holds the row (shared with other batches) until it commits, and a rebuild's TRUNCATE waits
# for every holder: the model is emptied before a batch or after it, never under it, and a batch
# that starts after a rebuild reads the new group and stops.
HOLD_PROJECTOR_GROUP = "SELECT group_id FROM {schema}.projector_state FOR SHARE"

# The model's tables (all but the migration log) are emptied in one statement; its own
# transaction then names the new group, so projectors see an empty model and a new group together.
#: The read model's tables a rebuild empties: those of schema ``$1`` but ``$2``
#: (`slotflow_api.projector.KEPT_BY_REBUILD`).
MODEL_TABLES = (
    "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> ALL($2::text[]) "
    "ORDER BY tablename"
)
#: `{tables}`: the names MODEL_TABLES found, each quoted by `slotflow.pg.statements.quote_ident`.
TRUNCATE_TABLES = "TRUNCATE {tables}"
SET_PROJECTOR_GROUP = "INSERT INTO {schema}.projector_state (singleton, group_id) VALUES (true, $1)"
