"""Every statement the claimer runs, each with the invariant it protects: on `runs` (run by
`store.py`), on `downstreams` (`downstreams.py`, `downstream_commands.py`) and the purge
(`retention.py`). `{schema}` is the claimer's schema, quoted by `slotflow.pg.statements.sql`; every
time decision uses the database clock (`now()`).
"""

from slotflow.pg.statements import compose

#: How many entries a run's history keeps (the newest; RECORD_OUTCOMES trims it as it appends).
HISTORY_KEPT = 100

#: Columns a JobDue fills, in the order of `store._due_arrays`.
DUE_COLUMNS = """
    u.run_id, u.job_id, u.slot, u.kind, u.handler, u.payload::jsonb, u.retry::jsonb, u.overlap,
    u.workflow_id, u.sequence, ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)), u.attempt,
    u.attempt, u.redrive, u.due_topic, u.due_partition, u.due_offset, u.due_key, u.due_value,
    u.due_headers::jsonb, u.due_ts, u.max_concurrent, u.rerun
"""

DUE_UNNEST = """
    unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::text[],
           $8::text[], $9::text[], $10::int[], $11::text[], $12::int[], $13::int[], $14::text[],
           $15::int[], $16::bigint[], $17::bytea[], $18::bytea[], $19::text[], $20::bigint[],
           $21::int[], $22::int[])
        AS u(run_id, job_id, slot, kind, handler, payload, retry, overlap, workflow_id, sequence,
             tags, attempt, redrive, due_topic, due_partition, due_offset, due_key, due_value,
             due_headers, due_ts, max_concurrent, rerun)
"""

#: What a claim or an outcome returns: everything but the stored JobDue record, which the caller
#: already holds (the record it is claiming with, or the run it claimed earlier).
RUN_COLUMNS = """
    r.run_id, r.job_id, r.slot, r.kind, r.handler, r.payload, r.retry, r.overlap, r.workflow_id,
    r.sequence, r.tags, r.attempt, r.round_start, r.redrive_count, r.state, r.fence_token, r.owner,
    r.cancel_requested, r.takeovers, r.lease_lapses, r.history, r.result, r.error, r.started_at, r.finished_at,
    r.updated_at, r.heartbeat_details
"""

INSERT_COLUMNS = """
    run_id, job_id, slot, kind, handler, payload, retry, overlap, workflow_id, sequence, tags,
    attempt, round_start, redrive_count, due_topic, due_partition, due_offset, due_key, due_value,
    due_headers, due_timestamp_ms, max_concurrent, rerun_count
"""

# claim_runs --
# One statement claims a wave of runs (run ids unique within it). A new run is inserted running
# with token 1. An existing row is claimed (token + 1) only when it is claimable:
#   - retrying, and this JobDue is the next attempt (the scheduled retry arrived);
#   - running with a lease that expired by the database clock (its claimer died; this JobDue is a
#     redelivery), unless a cancellation was requested (the reaper closes those); a lease that
#     lapsed rather than being released counts in lease_lapses (the executor quarantines the run
#     past a bound);
#   - dead-lettered, and this JobDue carries a redrive number above the row's (a fresh budget,
#     lease_lapses included);
#   - dead-lettered, retrying, skipped or cancelled, and this JobDue is an operator's re-run
#     (RerunSlots) with a re-run number above the row's: reopened like a redrive, with the current
#     definition the ticker re-issued. Never a running run (live lease or not: a lapsed one is the
#     reaper's), never a completed one: running a completed slot again is a forced re-run, a run
#     of its own (`{run id}#rerun-{n}`). The caller has checked the number against the ticker's
#     record (intake), so a forged re-run never reaches this statement.
# A redrive's or re-run's JobDue is what the run runs from then on: the ticker's re-issue from the
# schedule's current definition brings its handler, payload and policies (a typo'd handler fixed
# by `schedule update`), the orchestrator's the activity's own.
# A new activity run its workflow cancelled before the claim (`activity_cancels`) is inserted with
# cancel_requested set: the executor records it cancelled without starting the handler.
# Anything else (a live lease of any owner, completed, skipped, cancelled, buffered) returns no row:
# the caller skips the record. The row lock taken by ON CONFLICT makes two claimers of one run
# serialise, and the loser re-evaluates the WHERE against the winner's committed row.
#: The heartbeat deadline a claim starts an attempt with: now plus its policy's heartbeat_timeout
#: (ISO 8601 in the policy's JSON, as pydantic writes a duration), NULL without one. The claim counts
#: as the attempt's first heartbeat. `{policy}` is the policy's jsonb.
HEARTBEAT_DEADLINE = "now() + ({policy} ->> 'heartbeat_timeout')::interval"
#: The claim reopens the row (a fresh budget, the JobDue's definition): a redrive of a dead-lettered
#: run, or an operator's re-run of a run that is not running and not completed. An ordinary retry
#: (re-run number 0) is not a reopening.
REOPENED = (
    "(r.state = 'dead_lettered' OR (r.state IN ('skipped', 'cancelled', 'retrying') "
    "AND EXCLUDED.rerun_count > r.rerun_count))"
)
CLAIM = compose(
    """
INSERT INTO {schema}.runs AS r ({insert_columns},
    state, fence_token, owner, lease_expires_at, heartbeat_at, started_at, heartbeat_deadline,
    cancel_requested, cancel_requested_at)
SELECT {due_columns}, 'running', 1, $23, now() + make_interval(secs => $24), now(), now(), {new_deadline},
       c.run_id IS NOT NULL, c.requested_at
  FROM {due_unnest}
  LEFT JOIN {schema}.activity_cancels c ON u.workflow_id IS NOT NULL AND c.run_id = u.run_id
ON CONFLICT (run_id) DO UPDATE SET
    fence_token      = r.fence_token + 1,
    owner            = EXCLUDED.owner,
    state            = 'running',
    lease_expires_at = EXCLUDED.lease_expires_at,
    heartbeat_at     = EXCLUDED.heartbeat_at,
    started_at       = EXCLUDED.started_at,
    finished_at      = NULL,
    -- A retry of an activity its workflow cancelled meanwhile (the cancel came while the attempt
    -- was failing) starts cancelled: the handler is not run again.
    cancel_requested = r.workflow_id IS NOT NULL
                       AND EXISTS (SELECT 1 FROM {schema}.activity_cancels c WHERE c.run_id = r.run_id),
    -- held_reason stays until the downstream gate admits the attempt: a later slot of the job is
    -- not admitted before this one (slot order; slotflow_claimer.downstreams).
    attempt          = CASE WHEN r.state = 'running' THEN r.attempt ELSE r.attempt + 1 END,
    round_start      = CASE WHEN {reopened} THEN r.attempt + 1 ELSE r.round_start END,
    redrive_count    = GREATEST(r.redrive_count, EXCLUDED.redrive_count),
    rerun_count      = GREATEST(r.rerun_count, EXCLUDED.rerun_count),
    handler          = CASE WHEN {reopened} THEN EXCLUDED.handler ELSE r.handler END,
    payload          = CASE WHEN {reopened} THEN EXCLUDED.payload ELSE r.payload END,
    retry            = CASE WHEN {reopened} THEN EXCLUDED.retry ELSE r.retry END,
    heartbeat_deadline = {claimed_deadline},
    overlap          = CASE WHEN {reopened} THEN EXCLUDED.overlap ELSE r.overlap END,
    tags             = CASE WHEN {reopened} THEN EXCLUDED.tags ELSE r.tags END,
    takeovers        = r.takeovers + CASE WHEN r.state = 'running' THEN 1 ELSE 0 END,
    lease_lapses     = CASE WHEN r.state = 'running' AND NOT r.lease_released THEN r.lease_lapses + 1
                            WHEN {reopened} THEN 0
                            ELSE r.lease_lapses END,
    lease_released   = false,
    history          = CASE WHEN r.state = 'running' THEN r.history || jsonb_build_array(jsonb_build_object(
                           'event', 'takeover', 'attempt', r.attempt, 'fence_token', r.fence_token,
                           'owner', coalesce(r.owner, ''), 'error_type', 'LeaseExpired',
                           'message', format('lease of %s expired; redelivered JobDue claimed by %s',
                                             r.owner, EXCLUDED.owner),
                           'started_at', r.started_at, 'finished_at', now()))
                       ELSE r.history END,
    due_topic        = EXCLUDED.due_topic,
    due_partition    = EXCLUDED.due_partition,
    due_offset       = EXCLUDED.due_offset,
    due_key          = EXCLUDED.due_key,
    due_value        = EXCLUDED.due_value,
    due_headers      = EXCLUDED.due_headers,
    due_timestamp_ms = EXCLUDED.due_timestamp_ms,
    updated_at       = now()
 WHERE (r.state = 'retrying' AND EXCLUDED.attempt = r.attempt + 1)
    OR (r.state = 'running' AND r.lease_expires_at < now() AND NOT r.cancel_requested
        AND EXCLUDED.attempt >= r.attempt)
    OR (r.state = 'dead_lettered' AND EXCLUDED.redrive_count > r.redrive_count)
    OR (r.state IN ('dead_lettered', 'skipped', 'cancelled', 'retrying') AND EXCLUDED.rerun_count > r.rerun_count)
RETURNING {run_columns}
""",
    insert_columns=INSERT_COLUMNS,
    due_columns=DUE_COLUMNS,
    due_unnest=DUE_UNNEST,
    run_columns=RUN_COLUMNS,
    reopened=REOPENED,
    new_deadline=compose(HEARTBEAT_DEADLINE, policy="u.retry::jsonb"),
    claimed_deadline=compose(
        HEARTBEAT_DEADLINE,
        policy=compose("(CASE WHEN {reopened} THEN EXCLUDED.retry ELSE r.retry END)", reopened=REOPENED),
    ),
)

# insert_unstarted --
# Records a run that will not start now: 'skipped' by its overlap policy (token 1: deciding its
# fate is its one claim) or 'pending' in the job's buffer (token 0 until it starts): one slot
# under buffer_one, a queue in slot order under buffer_all.
# DO NOTHING: the callers hold the job's lock, and a row that exists already has a fate.
INSERT_UNSTARTED = compose(
    """
INSERT INTO {schema}.runs AS r ({insert_columns}, state, fence_token, owner, finished_at, error)
SELECT {due_columns}, s.state, CASE WHEN s.state = 'skipped' THEN 1 ELSE 0 END, $23,
       CASE WHEN s.state = 'skipped' THEN now() END,
       CASE WHEN s.state = 'skipped' THEN jsonb_build_object('reason', s.reason) END
  FROM {due_unnest}
  JOIN unnest($24::text[], $25::text[], $26::text[]) AS s(run_id, state, reason) USING (run_id)
ON CONFLICT (run_id) DO NOTHING
RETURNING {run_columns}
""",
    insert_columns=INSERT_COLUMNS,
    due_columns=DUE_COLUMNS,
    due_unnest=DUE_UNNEST,
    run_columns=RUN_COLUMNS,
)

EXISTING_RUN_IDS = "SELECT run_id FROM {schema}.runs WHERE run_id = ANY($1::text[])"

# Running (any lease: an expired one will be taken over, so it still runs) and buffered runs.
ACTIVE_RUNS = """
SELECT run_id, job_id, state FROM {schema}.runs
 WHERE job_id = ANY($1::text[]) AND state IN ('running', 'pending') ORDER BY created_at
"""

# Only running runs: a run that already has a fate has nothing left to cancel.
REQUEST_CANCEL = """
UPDATE {schema}.runs SET cancel_requested = true, updated_at = now()
 WHERE run_id = ANY($1::text[]) AND state = 'running' RETURNING run_id
"""

# Only still-buffered runs, and deciding their fate raises the token like any claim.
SUPERSEDE_PENDING = """
UPDATE {schema}.runs SET state = 'skipped', fence_token = fence_token + 1, owner = $2,
       finished_at = now(), error = jsonb_build_object('reason', $3::text), updated_at = now()
 WHERE run_id = ANY($1::text[]) AND state = 'pending' RETURNING *
"""

# heartbeat --
# Extends only leases this owner still holds with the token it claimed with: a run taken over in
# the meantime (token moved on) is simply not returned, and the caller cancels its handler. Each
# renewed run says whether its cancellation was asked for (cancel_previous, or its workflow's
# CancelActivity): the caller cancels that handler too.
#: Whether a running run's cancellation was asked for: its flag, or (an activity's run) a cancel that
#: arrived while its claim was committing and so did not see the row (`activity_cancels`).
CANCEL_ASKED = (
    "(r.cancel_requested OR (r.workflow_id IS NOT NULL "
    "AND EXISTS (SELECT 1 FROM {schema}.activity_cancels c WHERE c.run_id = r.run_id)))"
)
HEARTBEAT = compose(
    """
UPDATE {schema}.runs AS r
   SET lease_expires_at = now() + make_interval(secs => $4), heartbeat_at = now()
  FROM unnest($1::text[], $2::bigint[]) AS h(run_id, token)
 WHERE r.run_id = h.run_id AND r.fence_token = h.token AND r.owner = $3 AND r.state = 'running'
RETURNING r.run_id, {cancel_asked} AS cancel_requested
""",
    cancel_asked=CANCEL_ASKED,
)

# record_outcomes --
# The fenced outcome: a row changes only if it is still running under the very token the outcome
# was produced with. A stale token (the run was taken over) matches nothing and is never applied;
# the caller counts it as FenceRejected. The history entry is stamped from the row itself, so it
# names the attempt, token and owner that actually held the run. The history keeps the newest
# HISTORY_KEPT entries: a run with unlimited attempts (RetryPolicy.max_attempts 0) appends one
# per failed attempt for as long as it fails, and the row (rewritten on every write), its
# RunDeadLettered and its letter stay bounded; the attempt number in each entry says where it was.
RECORD_OUTCOMES = compose(
    """
UPDATE {schema}.runs AS r SET
    state            = u.state,
    result           = u.result::jsonb,
    error            = u.error::jsonb,
    -- Short histories (nearly every run) are appended to as they are; only a full one is cut.
    history          = CASE WHEN u.entry IS NULL THEN r.history ELSE (
                           CASE WHEN jsonb_array_length(r.history) < {history_kept} THEN r.history ELSE (
                           SELECT coalesce(jsonb_agg(kept.entry ORDER BY kept.position), '[]'::jsonb)
                             FROM jsonb_array_elements(r.history) WITH ORDINALITY AS kept(entry, position)
                            WHERE kept.position > jsonb_array_length(r.history) - ({history_kept} - 1)
                           ) END
                       ) || jsonb_build_array(
                           u.entry::jsonb || jsonb_build_object(
                               'attempt', r.attempt, 'fence_token', r.fence_token,
                               'owner', coalesce(r.owner, ''), 'started_at', r.started_at,
                               'finished_at', now())) END,
    finished_at      = now(),
    lease_expires_at = NULL,
    -- attempt - round_start + 1 is the attempt within the budget: moving both keeps it unchanged.
    round_start      = r.round_start + u.refund,
    held_reason      = u.held_reason,
    -- The attempt's last heartbeat details not yet written (throttled) go with its outcome.
    heartbeat_details = coalesce(u.details::jsonb, r.heartbeat_details),
    updated_at       = now()
  FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[],
              $8::text[], $9::text[])
       AS u(run_id, token, state, result, error, entry, refund, held_reason, details)
 WHERE r.run_id = u.run_id AND r.fence_token = u.token AND r.state = 'running'
RETURNING {run_columns}
""",
    run_columns=RUN_COLUMNS,
    history_kept=str(HISTORY_KEPT),
)

# start_buffered --
# Starts the buffered runs of each job whose previous run left 'running', oldest first (arrival,
# then slot: one intake transaction stamps a whole backfill with the same created_at), while fewer
# than the buffered run's max_concurrent run (1 for buffer_one, so one start when none runs).
# The callers hold the jobs' locks, so an intake deciding a new run's overlap for the same job
# waits and then sees these starts.
START_BUFFERED = compose(
    """
WITH running AS (
    SELECT job_id, count(*) AS n FROM {schema}.runs
     WHERE job_id = ANY($1::text[]) AND state = 'running' GROUP BY job_id
), queued AS (
    SELECT p.run_id, p.job_id, p.max_concurrent,
           row_number() OVER (PARTITION BY p.job_id ORDER BY p.created_at, p.slot, p.run_id) AS place
      FROM {schema}.runs p
     WHERE p.job_id = ANY($1::text[]) AND p.state = 'pending'
), next AS (
    SELECT q.run_id FROM queued q LEFT JOIN running l USING (job_id)
     WHERE q.place <= q.max_concurrent - COALESCE(l.n, 0)
)
UPDATE {schema}.runs AS r
   SET state = 'running', fence_token = r.fence_token + 1, owner = $2,
       lease_expires_at = now() + make_interval(secs => $3), heartbeat_at = now(), started_at = now(),
       heartbeat_deadline = {deadline}, updated_at = now()
  FROM next
 WHERE r.run_id = next.run_id
RETURNING r.*
""",
    deadline=compose(HEARTBEAT_DEADLINE, policy="r.retry"),
)

# reap --
# Takes over runs whose lease expired by the database clock: SKIP LOCKED so several reapers split
# the work, and the token goes up so the previous owner's late writes bounce. The attempt stays:
# the handler runs again for the same attempt (its heartbeat deadline starts again, and it reads
# the details recorded so far), and the takeover is written into the history. A lease that lapsed
# (not released at shutdown) counts in lease_lapses, which bounds how often one run may take a
# claimer down with it.
REAP = compose(
    """
WITH victims AS (
    SELECT run_id FROM {schema}.runs
     WHERE state = 'running' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.runs AS r
   SET fence_token = r.fence_token + 1, owner = $2,
       lease_expires_at = now() + make_interval(secs => $3), heartbeat_at = now(), started_at = now(),
       heartbeat_deadline = {deadline},
       takeovers = r.takeovers + 1,
       lease_lapses = r.lease_lapses + CASE WHEN r.lease_released THEN 0 ELSE 1 END,
       lease_released = false,
       history = r.history || jsonb_build_array(jsonb_build_object(
           'event', 'takeover', 'attempt', r.attempt, 'fence_token', r.fence_token,
           'owner', coalesce(r.owner, ''), 'error_type', 'LeaseExpired',
           'message', format('lease of %s expired; taken over by %s', r.owner, $2::text),
           'started_at', r.started_at, 'finished_at', now())),
       updated_at = now()
  FROM victims
 WHERE r.run_id = victims.run_id
RETURNING r.*
""",
    deadline=compose(HEARTBEAT_DEADLINE, policy="r.retry"),
)

# time_out_silent --
# Fails the attempts whose heartbeat deadline passed (database clock) more than $4 seconds ago: their
# claimer stayed silent because it froze, died or lost the database, so it cannot enforce the
# heartbeat_timeout itself (a live claimer does, on its own clock, from the handler's start and each
# heartbeat: later than the claim that set the deadline, and the grace $4 keeps the two apart; when
# they do meet, the token decides and one failure is recorded). The run is taken with the next
# token, as a takeover takes it, so the silent claimer's late heartbeat, outcome and fenced writes
# bounce; unlike a takeover it counts no lease lapse, writes no takeover entry and keeps the
# attempt's started_at: the caller records the attempt's failure (HeartbeatTimeout) at once, under
# the new token, and it is retried by the run's policy. SKIP LOCKED: several reapers split the work.
TIME_OUT_SILENT = """
WITH silent AS (
    SELECT run_id, owner FROM {schema}.runs
     WHERE state = 'running' AND heartbeat_deadline < now() - make_interval(secs => $4)
     ORDER BY heartbeat_deadline
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.runs AS r
   SET fence_token = r.fence_token + 1, owner = $2,
       lease_expires_at = now() + make_interval(secs => $3), heartbeat_at = now(),
       heartbeat_deadline = NULL, lease_released = false, updated_at = now()
  FROM silent
 WHERE r.run_id = silent.run_id
RETURNING r.*, silent.owner AS silent_owner
"""

# record_heartbeat --
# An activity heartbeat (`ctx.heartbeat`), fenced like every write of a running run: only the attempt
# holding the run's current token records it, so a zombie's (its run taken over, or its attempt
# failed by time_out_silent) matches no row and is refused. Details replace the recorded ones (NULL:
# they stay); the deadline moves to now() plus the heartbeat timeout ($4 seconds; NULL without one).
# Like a lease renewal it says whether the run's cancellation was asked for (CANCEL_ASKED), so a
# handler that heartbeats learns of its workflow's cancel at its next heartbeat write.
RECORD_HEARTBEAT = compose(
    """
UPDATE {schema}.runs AS r
   SET heartbeat_details = coalesce($3::jsonb, r.heartbeat_details),
       heartbeat_deadline = now() + make_interval(secs => $4)
 WHERE r.run_id = $1 AND r.fence_token = $2 AND r.state = 'running'
RETURNING r.run_id, {cancel_asked} AS cancel_requested
""",
    cancel_asked=CANCEL_ASKED,
)

# excuse_lapses --
# A claimer whose heartbeats failed (the database restarted, failed over or was cut off from it),
# or whose process froze (stopped, or starved of CPU, with no handler blocking its loop: the
# watchdog's froze_since), loses its runs once their leases lapse, but it was alive all along: such
# a lapse says nothing about the run, and counting it would quarantine healthy runs after a few
# database restarts or a busy minute. So the owner excuses each run it lost that way, at its next
# contact with the database:
#   - still its own (same token, still running): the lease is released at once and marked
#     released, so the takeover that follows counts no lapse;
#   - taken over already from that token by a takeover that counted it: the lapse is taken back.
# Only the owner named in the takeover excuses it, once per token (excused_tokens): a retried
# statement changes nothing. A claimer killed by its run never gets here: it has no heartbeat left.
EXCUSE_LAPSES = """
UPDATE {schema}.runs AS r
   SET lease_released   = CASE WHEN r.fence_token = lost.token THEN true ELSE r.lease_released END,
       lease_expires_at = CASE WHEN r.fence_token = lost.token THEN now() ELSE r.lease_expires_at END,
       lease_lapses     = CASE WHEN r.fence_token > lost.token THEN greatest(r.lease_lapses - 1, 0)
                               ELSE r.lease_lapses END,
       excused_tokens   = r.excused_tokens || lost.token,
       updated_at       = now()
  FROM unnest($1::text[], $2::bigint[]) AS lost(run_id, token)
 WHERE r.run_id = lost.run_id
   AND NOT lost.token = ANY(r.excused_tokens)
   AND ((r.fence_token = lost.token AND r.owner = $3 AND r.state = 'running')
        OR (r.fence_token > lost.token
            AND r.history @> jsonb_build_array(jsonb_build_object(
                    'event', 'takeover', 'fence_token', lost.token, 'owner', $3::text))))
"""

# Buffered for a while (database clock) with nothing of the job running: its start was lost.
ORPHANED_BUFFERS = """
SELECT DISTINCT p.job_id FROM {schema}.runs p
 WHERE p.state = 'pending' AND p.updated_at < now() - make_interval(secs => $1)
   AND NOT EXISTS (SELECT 1 FROM {schema}.runs l WHERE l.job_id = p.job_id AND l.state = 'running')
 LIMIT $2
"""

# Only the token's holder releases: a run taken over meanwhile is left to its new owner.
RELEASE = """
UPDATE {schema}.runs AS r SET lease_expires_at = now(), lease_released = $3, updated_at = now()
  FROM unnest($1::text[], $2::bigint[]) AS h(run_id, token)
 WHERE r.run_id = h.run_id AND r.fence_token = h.token AND r.state = 'running'
"""

# reopen --
# A schedule's dead-lettered run, reopened for a redrive (docs/decisions/0009), once per redrive
# number: only while it is dead-lettered, a schedule's (an activity's run is its workflow's to
# retry), its number above the row's, and its stored JobDue the very record the letter points at
# (a letter naming another position reopens nothing). It becomes `retrying` with a fresh attempt
# budget (round_start past its last attempt) and its lease lapses forgotten; the caller stages the
# retry timer of its next attempt, whose JobDue (the stored one) is claimed with the next token.
REOPEN = """
UPDATE {schema}.runs AS r
   SET state = 'retrying', round_start = r.attempt + 1, redrive_count = $2, lease_lapses = 0,
       lease_released = false, held_reason = NULL, updated_at = now()
 WHERE r.run_id = $1 AND r.state = 'dead_lettered' AND r.workflow_id IS NULL AND r.redrive_count < $2
   AND r.due_topic = $3 AND r.due_partition = $4 AND r.due_offset = $5
RETURNING r.*
"""

# What a refused reopen is told: the row as it stands (read in the same transaction).
REOPEN_REFUSAL = """
SELECT state, workflow_id, redrive_count, due_topic, due_partition, due_offset
  FROM {schema}.runs WHERE run_id = $1
"""


DOWNSTREAM_ENSURE = (
    "INSERT INTO {schema}.downstreams (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING"
)

# Taken before any counter is read: the lock serialises every claimer's decisions on these rows.
DOWNSTREAM_LOCK = """
SELECT name, state, opened_at, probes, probed_at, manual, settings::text AS settings, window_since,
       now() AS now
  FROM {schema}.downstreams WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE
"""

# The window: buckets newer than `now() - window` (the downstream's own window, else the claimers'
# default $2), and none from before the breaker last closed.
DOWNSTREAM_COUNTS = """
SELECT d.name, coalesce(sum(w.firsts), 0)::int AS firsts, coalesce(sum(w.retries), 0)::int AS retries,
       coalesce(sum(w.successes), 0)::int AS successes, coalesce(sum(w.failures), 0)::int AS failures
  FROM {schema}.downstreams d
  LEFT JOIN {schema}.downstream_window w
         ON w.name = d.name
        AND w.bucket > now() - make_interval(secs => coalesce((d.settings->>'window_seconds')::float8, $2))
        AND w.bucket >= date_trunc('second', d.window_since)
 WHERE d.name = ANY($1::text[]) GROUP BY d.name
"""

DOWNSTREAM_COUNT = """
INSERT INTO {schema}.downstream_window AS w (name, bucket, firsts, retries, successes, failures)
SELECT unnest($1::text[]), date_trunc('second', now()), $2::int, $3::int, unnest($4::int[]), unnest($5::int[])
ON CONFLICT (name, bucket) DO UPDATE SET
    firsts = w.firsts + EXCLUDED.firsts, retries = w.retries + EXCLUDED.retries,
    successes = w.successes + EXCLUDED.successes, failures = w.failures + EXCLUDED.failures
"""

DOWNSTREAM_PRUNE = """
DELETE FROM {schema}.downstream_window w USING {schema}.downstreams d
 WHERE d.name = w.name AND w.name = ANY($1::text[])
   AND w.bucket < now() - make_interval(secs => 2 * coalesce((d.settings->>'window_seconds')::float8, $2))
"""

# A change's time (changed_at, and the change row's `at`, which is the same) is the clock after the
# row lock, never the transaction's start (now()): a report that read the row before this change
# took the lock has an earlier time, so the read model, which keeps the newest fact, cannot let that
# report's old state overwrite the change. Recorded only after DOWNSTREAM_MOVE or DOWNSTREAM_CONFIGURE set changed_at.
DOWNSTREAM_MOVE = """
UPDATE {schema}.downstreams SET state = $2, opened_at = $3, probes = $4, probed_at = $5, manual = $6,
       window_since = CASE WHEN $2 = 'closed' AND state <> 'closed' THEN now() ELSE window_since END,
       changed_at = CASE WHEN state <> $2 OR manual <> $6 THEN clock_timestamp() ELSE changed_at END
 WHERE name = $1
"""

DOWNSTREAM_CONFIGURE = """
UPDATE {schema}.downstreams SET settings = $2::jsonb, changed_at = clock_timestamp() WHERE name = $1
"""

DOWNSTREAM_CHANGED = """
INSERT INTO {schema}.downstream_changes (name, from_state, to_state, owner, cause, reason, command_id, at)
SELECT $1, $2, $3, $4, $5, $6, $7, changed_at FROM {schema}.downstreams WHERE name = $1
RETURNING id, at
"""

# A held run names its downstream after the colon of its reason ("circuit_open:bank-api").
DOWNSTREAM_HELD_FOR = "substr(held_reason, strpos(held_reason, ':') + 1)"

# Held: waiting for it, or claimed again and not yet admitted (held_reason is cleared on admission).
DOWNSTREAM_HELD_COUNT = compose(
    "SELECT count(*)::int FROM {schema}.runs "
    "WHERE state IN ('retrying', 'running') AND held_reason IS NOT NULL AND {held_for} = $1",
    held_for=DOWNSTREAM_HELD_FOR,
)

# Slot order within a job: an earlier slot of the same job that was held for one of these
# downstreams and not yet admitted (waiting, or claimed and on its way here) goes first
# (runs_held index). held_reason is cleared only by the admission (DOWNSTREAM_ADMITTED), under the row lock.
DOWNSTREAM_EARLIER_HELD = compose(
    "SELECT EXISTS (SELECT 1 FROM {schema}.runs WHERE job_id = $1 AND slot < $2 AND run_id <> $3 "
    "AND state IN ('retrying', 'running') AND held_reason IS NOT NULL AND {held_for} = ANY($4::text[]))",
    held_for=DOWNSTREAM_HELD_FOR,
)

DOWNSTREAM_ADMITTED = (
    "UPDATE {schema}.runs SET held_reason = NULL "
    "WHERE run_id = $1 AND fence_token = $2 AND held_reason IS NOT NULL"
)

# The runs a closing breaker brings forward, oldest slot first (ties by job, for a stable order).
DOWNSTREAM_HELD_RUNS = compose(
    "SELECT * FROM {schema}.runs WHERE state = 'retrying' AND held_reason IS NOT NULL "
    "AND {held_for} = $1 ORDER BY slot, job_id LIMIT $2",
    held_for=DOWNSTREAM_HELD_FOR,
)

# One claimer reports each downstream per interval: the one that takes its row first.
DOWNSTREAM_DUE_REPORTS = """
SELECT name, state, manual, settings::text AS settings, changed_at, reported_at, reported_idle, now() AS now
  FROM {schema}.downstreams WHERE reported_at <= now() - make_interval(secs => $1)
 ORDER BY name FOR UPDATE SKIP LOCKED
"""

DOWNSTREAM_HELD_COUNTS = compose(
    "SELECT {held_for} AS name, count(*)::int AS held FROM {schema}.runs "
    "WHERE state IN ('retrying', 'running') AND held_reason IS NOT NULL GROUP BY 1",
    held_for=DOWNSTREAM_HELD_FOR,
)

DOWNSTREAM_REPORTED = """
UPDATE {schema}.downstreams AS d SET reported_at = now(), reported_idle = u.idle
  FROM unnest($1::text[], $2::bool[]) AS u(name, idle) WHERE d.name = u.name
"""


DOWNSTREAM_COMMAND_KNOWN = "SELECT EXISTS (SELECT 1 FROM {schema}.downstreams WHERE name = $1)"

# The replay window of signed commands is judged by the database's clock, never the host's.
DOWNSTREAM_COMMAND_NOW = "SELECT now()"


# Ended runs last changed more than $1 seconds ago, at most $2, oldest first (runs_ended).
PURGE_ENDED = """
WITH doomed AS (
    SELECT run_id FROM {schema}.runs
     WHERE state IN ('completed', 'skipped', 'cancelled')
       AND updated_at < now() - make_interval(secs => $1)
     ORDER BY updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.runs WHERE run_id IN (SELECT run_id FROM doomed) RETURNING run_id
"""


# Activity cancels recorded more than $1 seconds ago, at most $2, oldest first: by then the run they
# name ended long ago, and no JobDue of it can still come (the same floor as PURGE_ENDED's).
PURGE_ACTIVITY_CANCELS = """
WITH doomed AS (
    SELECT run_id FROM {schema}.activity_cancels
     WHERE requested_at < now() - make_interval(secs => $1)
     ORDER BY requested_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.activity_cancels WHERE run_id IN (SELECT run_id FROM doomed) RETURNING run_id
"""


# reruns_issued --
# Whether the ticker recorded each (job, slot, re-run number, forced) a re-run's JobDue claims,
# asked through the ticker's own function (`{schema}` is the ticker's schema here): the row is
# written in the transaction that staged the JobDue, so a genuine re-run is always found, and the
# claimer needs no right on the ticker's tables to ask.
RERUNS_ISSUED = """
SELECT {schema}.rerun_issued(w.job_id, w.slot, w.number, w.forced) AS issued
  FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bool[]) WITH ORDINALITY
       AS w(job_id, slot, number, forced, position)
 ORDER BY w.position
"""


# cancel_activity --
# A workflow's CancelActivity (the caller has checked it against the orchestrator's record and this
# run's identity: `slotflow.issuers.cancel_verdict`). The request is recorded once per run
# (`activity_cancels`, so a run claimed later starts cancelled); the run, if the claimer holds it
# and it is still that workflow's activity, is:
#   - running: flagged (cancel_requested); its claimer's next lease renewal or heartbeat write
#     returns the flag and the executor cancels the handler, recording the attempt `cancelled`
#     under its own token;
#   - retrying (waiting for its retry timer, or held for a downstream) or pending: `cancelled` at
#     once, with the next token (deciding its fate is a claim, so the timer's JobDue finds nothing
#     to claim and the cancel's RunFailed has an id of its own) and a history entry; the caller
#     stages its RunFailed and cancels the retry timer;
#   - anything else (completed, dead-lettered, cancelled, skipped): left as it is.
# Idempotent: a second delivery finds the run flagged or ended and changes nothing.
RECORD_ACTIVITY_CANCEL = """
INSERT INTO {schema}.activity_cancels (run_id, workflow_id, sequence, reason)
VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO NOTHING
"""

CANCEL_ACTIVITY = compose(
    """
UPDATE {schema}.runs AS r SET
    cancel_requested    = true,
    cancel_requested_at = coalesce(r.cancel_requested_at, now()),
    state       = CASE WHEN old.state = 'running' THEN r.state ELSE 'cancelled' END,
    fence_token = CASE WHEN old.state = 'running' THEN r.fence_token ELSE r.fence_token + 1 END,
    finished_at = CASE WHEN old.state = 'running' THEN r.finished_at ELSE now() END,
    held_reason = CASE WHEN old.state = 'running' THEN r.held_reason END,
    history     = CASE WHEN old.state = 'running' THEN r.history ELSE r.history || jsonb_build_array(
                      jsonb_build_object(
                          'event', 'cancelled', 'error_type', 'RunCancelled', 'message', $4::text,
                          'attempt', r.attempt, 'fence_token', r.fence_token + 1,
                          'owner', $5::text, 'started_at', r.started_at, 'finished_at', now())) END,
    owner       = CASE WHEN old.state = 'running' THEN r.owner ELSE $5 END,
    updated_at  = now()
  FROM (SELECT run_id, state FROM {schema}.runs WHERE run_id = $1 FOR UPDATE) AS old
 WHERE r.run_id = old.run_id AND r.workflow_id = $2 AND r.sequence = $3 AND r.kind = 'activity'
   AND (old.state IN ('retrying', 'pending') OR (old.state = 'running' AND NOT r.cancel_requested))
RETURNING {run_columns}, old.state AS was
""",
    run_columns=RUN_COLUMNS,
)

# What a cancel's issuer check reads of the run it names (`slotflow.issuers.CancelTarget`).
CANCEL_TARGET = """
SELECT run_id, kind, workflow_id, sequence, handler, state FROM {schema}.runs WHERE run_id = $1
"""

# activity_cancel_issued --
# Whether the orchestrator recorded this cancel of the workflow's activity at that sequence, asked
# through the orchestrator's own function (`{schema}` is the orchestrator's schema here): the row is
# written in the decision that staged the CancelActivity, so a genuine cancel is always found, and
# the claimer needs no right on the orchestrator's tables to ask (USAGE on the schema only).
ACTIVITY_CANCEL_ISSUED = "SELECT {schema}.activity_cancel_issued($1, $2)"
