"""Every statement on `runs`, each with the invariant it protects. All take ``conn`` and run inside
the caller's transaction; every time decision uses the database clock (`now()`).

The fence: every claim raises `fence_token` by one and every write that changes a running run's
fate names the token it was claimed with. A claimer that lost its run (paused past its lease,
partitioned away) carries an old token, so its writes match no row and change nothing.
"""

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slotflow.contracts import RetryPolicy
from slotflow.core.nul import jsonb_text
from slotflow.kafka.records import Record
from slotflow.pg.pool import Conn
from slotflow.pg.statements import compose, sql
from slotflow_claimer.runs import Due, Run

#: Columns a JobDue fills, in the order of `_due_arrays`.
_DUE_COLUMNS = """
    u.run_id, u.job_id, u.slot, u.kind, u.handler, u.payload::jsonb, u.retry::jsonb, u.overlap,
    u.workflow_id, u.sequence, ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)), u.attempt,
    u.attempt, u.redrive, u.due_topic, u.due_partition, u.due_offset, u.due_key, u.due_value,
    u.due_headers::jsonb, u.due_ts, u.max_concurrent, u.rerun
"""
_DUE_UNNEST = """
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
_RUN_COLUMNS = """
    r.run_id, r.job_id, r.slot, r.kind, r.handler, r.payload, r.retry, r.overlap, r.workflow_id,
    r.sequence, r.tags, r.attempt, r.round_start, r.redrive_count, r.state, r.fence_token, r.owner,
    r.cancel_requested, r.takeovers, r.lease_lapses, r.history, r.result, r.error, r.started_at, r.finished_at,
    r.updated_at
"""
_INSERT_COLUMNS = """
    run_id, job_id, slot, kind, handler, payload, retry, overlap, workflow_id, sequence, tags,
    attempt, round_start, redrive_count, due_topic, due_partition, due_offset, due_key, due_value,
    due_headers, due_timestamp_ms, max_concurrent, rerun_count
"""


@functools.lru_cache(maxsize=64)
def _headers_json(headers: tuple[tuple[str, bytes], ...]) -> str:
    # JobDue records mostly carry the same few headers: encode each distinct set once.
    return jsonb_text({k: v.decode("latin-1") for k, v in headers})


@functools.lru_cache(maxsize=256)
def _retry_json(policy: RetryPolicy) -> str:
    return policy.model_dump_json()


def _due_arrays(dues: Sequence[Due]) -> list[list[object]]:
    columns: list[list[object]] = [[] for _ in range(22)]
    for due in dues:
        job, record = due.job, due.record
        values: tuple[object, ...] = (
            job.run_id,
            job.job_id,
            job.slot,
            job.kind,
            job.handler,
            jsonb_text(job.payload) if job.payload else "{}",
            _retry_json(job.retry),
            job.overlap,
            job.workflow_id,
            job.sequence,
            jsonb_text(list(job.tags)) if job.tags else "[]",
            job.attempt,
            due.redrive_count,
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value or b"",
            _headers_json(record.headers),
            record.timestamp_ms,
            job.max_concurrent,
            job.rerun,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns


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
# A redrive's or re-run's JobDue is what the run runs from then on: the ticker's re-issue from the schedule's current definition brings its handler, payload and policies
#     (a typo'd handler fixed by `schedule update`), the orchestrator's the activity's own.
# Anything else (a live lease of any owner, completed, skipped, cancelled, buffered) returns no row:
# the caller skips the record. The row lock taken by ON CONFLICT makes two claimers of one run
# serialise, and the loser re-evaluates the WHERE against the winner's committed row.
#: The claim reopens the row (a fresh budget, the JobDue's definition): a redrive of a dead-lettered
#: run, or an operator's re-run of a run that is not running and not completed. An ordinary retry
#: (re-run number 0) is not a reopening.
_REOPENED = (
    "(r.state = 'dead_lettered' OR (r.state IN ('skipped', 'cancelled', 'retrying') "
    "AND EXCLUDED.rerun_count > r.rerun_count))"
)
_CLAIM = compose(
    """
INSERT INTO {schema}.runs AS r ({insert_columns},
    state, fence_token, owner, lease_expires_at, heartbeat_at, started_at)
SELECT {due_columns}, 'running', 1, $23, now() + make_interval(secs => $24), now(), now()
  FROM {due_unnest}
ON CONFLICT (run_id) DO UPDATE SET
    fence_token      = r.fence_token + 1,
    owner            = EXCLUDED.owner,
    state            = 'running',
    lease_expires_at = EXCLUDED.lease_expires_at,
    heartbeat_at     = EXCLUDED.heartbeat_at,
    started_at       = EXCLUDED.started_at,
    finished_at      = NULL,
    cancel_requested = false,
    -- held_reason stays until the downstream gate admits the attempt: a later slot of the job is
    -- not admitted before this one (slot order; slotflow_claimer.downstreams).
    attempt          = CASE WHEN r.state = 'running' THEN r.attempt ELSE r.attempt + 1 END,
    round_start      = CASE WHEN {reopened} THEN r.attempt + 1 ELSE r.round_start END,
    redrive_count    = GREATEST(r.redrive_count, EXCLUDED.redrive_count),
    rerun_count      = GREATEST(r.rerun_count, EXCLUDED.rerun_count),
    handler          = CASE WHEN {reopened} THEN EXCLUDED.handler ELSE r.handler END,
    payload          = CASE WHEN {reopened} THEN EXCLUDED.payload ELSE r.payload END,
    retry            = CASE WHEN {reopened} THEN EXCLUDED.retry ELSE r.retry END,
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
    insert_columns=_INSERT_COLUMNS,
    due_columns=_DUE_COLUMNS,
    due_unnest=_DUE_UNNEST,
    run_columns=_RUN_COLUMNS,
    reopened=_REOPENED,
)


async def claim(conn: Conn, schema: str, dues: Sequence[Due], *, owner: str, ttl: float) -> list[Run]:
    """Claim the runs of ``dues`` (unique run ids) for ``owner``; returns those claimed."""
    if not dues:
        return []
    rows = await conn.fetch(sql(_CLAIM, schema), *_due_arrays(dues), owner, ttl)
    records = {due.job.run_id: due.record for due in dues}
    return [Run(row, records[row["run_id"]]) for row in rows]


# insert_unstarted --
# Records a run that will not start now: 'skipped' by its overlap policy (token 1: deciding its
# fate is its one claim) or 'pending' in the job's buffer (token 0 until it starts): one slot
# under buffer_one, a queue in slot order under buffer_all.
# DO NOTHING: the callers hold the job's lock, and a row that exists already has a fate.
_INSERT_UNSTARTED = compose(
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
    insert_columns=_INSERT_COLUMNS,
    due_columns=_DUE_COLUMNS,
    due_unnest=_DUE_UNNEST,
    run_columns=_RUN_COLUMNS,
)


@dataclass(frozen=True, slots=True)
class Unstarted:
    due: Due
    state: str  # skipped | pending
    reason: str


async def insert_unstarted(conn: Conn, schema: str, items: Sequence[Unstarted], *, owner: str) -> list[Run]:
    if not items:
        return []
    rows = await conn.fetch(
        sql(_INSERT_UNSTARTED, schema),
        *_due_arrays([i.due for i in items]),
        owner,
        [i.due.job.run_id for i in items],
        [i.state for i in items],
        [i.reason for i in items],
    )
    records = {i.due.job.run_id: i.due.record for i in items}
    return [Run(row, records[row["run_id"]]) for row in rows]


async def lock_jobs(conn: Conn, job_ids: Iterable[str]) -> None:
    """Serialise overlap choices per job for the rest of the transaction.

    Sorted, so two transactions locking overlapping sets always queue in the same order and cannot
    deadlock on each other.
    """
    ordered = sorted(set(job_ids))
    if ordered:
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('slotflow.claimer.job'), hashtext(j)) "
            "FROM unnest($1::text[]) AS t(j)",
            ordered,
        )


@dataclass(frozen=True, slots=True)
class Active:
    """A run of a job that counts against a new one's overlap policy."""

    run_id: str
    job_id: str
    state: str  # running | pending


_EXISTING_RUN_IDS = "SELECT run_id FROM {schema}.runs WHERE run_id = ANY($1::text[])"


async def existing_run_ids(conn: Conn, schema: str, run_ids: Sequence[str]) -> set[str]:
    rows = await conn.fetch(sql(_EXISTING_RUN_IDS, schema), run_ids)
    return {row["run_id"] for row in rows}


# Running (any lease: an expired one will be taken over, so it still runs) and buffered runs.
_ACTIVE_RUNS = """
SELECT run_id, job_id, state FROM {schema}.runs
 WHERE job_id = ANY($1::text[]) AND state IN ('running', 'pending') ORDER BY created_at
"""


async def active_runs(conn: Conn, schema: str, job_ids: Sequence[str]) -> list[Active]:
    """Running (any lease: an expired one will be taken over, so it still runs) and buffered runs."""
    rows = await conn.fetch(sql(_ACTIVE_RUNS, schema), job_ids)
    return [Active(row["run_id"], row["job_id"], row["state"]) for row in rows]


# Only running runs: a run that already has a fate has nothing left to cancel.
_REQUEST_CANCEL = """
UPDATE {schema}.runs SET cancel_requested = true, updated_at = now()
 WHERE run_id = ANY($1::text[]) AND state = 'running' RETURNING run_id
"""


async def request_cancel(conn: Conn, schema: str, run_ids: Sequence[str]) -> list[str]:
    """Ask the owners of running runs to cancel them; their next heartbeat sees the flag."""
    rows = await conn.fetch(sql(_REQUEST_CANCEL, schema), run_ids)
    return [row["run_id"] for row in rows]


# Only still-buffered runs, and deciding their fate raises the token like any claim.
_SUPERSEDE_PENDING = """
UPDATE {schema}.runs SET state = 'skipped', fence_token = fence_token + 1, owner = $2,
       finished_at = now(), error = jsonb_build_object('reason', $3::text), updated_at = now()
 WHERE run_id = ANY($1::text[]) AND state = 'pending' RETURNING *
"""


async def supersede_pending(
    conn: Conn, schema: str, run_ids: Sequence[str], *, owner: str, reason: str
) -> list[Run]:
    """Skip buffered runs a newer run replaces (cancel_previous); deciding their fate is a claim."""
    rows = await conn.fetch(
        sql(_SUPERSEDE_PENDING, schema),
        run_ids,
        owner,
        reason,
    )
    return [Run.from_row(row) for row in rows]


# heartbeat --
# Extends only leases this owner still holds with the token it claimed with: a run taken over in
# the meantime (token moved on) is simply not returned, and the caller cancels its handler.
_HEARTBEAT = """
UPDATE {schema}.runs AS r
   SET lease_expires_at = now() + make_interval(secs => $4), heartbeat_at = now()
  FROM unnest($1::text[], $2::bigint[]) AS h(run_id, token)
 WHERE r.run_id = h.run_id AND r.fence_token = h.token AND r.owner = $3 AND r.state = 'running'
RETURNING r.run_id, r.cancel_requested
"""


async def heartbeat(
    conn: Conn, schema: str, tokens: Mapping[str, int], *, owner: str, ttl: float
) -> dict[str, bool]:
    """Renew leases; returns run id -> cancel requested, for the runs still held."""
    if not tokens:
        return {}
    rows = await conn.fetch(sql(_HEARTBEAT, schema), list(tokens), list(tokens.values()), owner, ttl)
    return {row["run_id"]: row["cancel_requested"] for row in rows}


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """The state a run should move to, guarded by the token it was claimed with."""

    run_id: str
    fence_token: int
    state: str  # completed | retrying | dead_lettered | cancelled
    result: str | None = None  # JSON
    error: str | None = None  # JSON
    entry: str | None = None  # JSON: a history entry (error_type, message, event)
    due: Record | None = None
    #: Attempts given back: a run held for its downstream did not spend the one it was claimed for.
    refund: int = 0
    held_reason: str | None = None


# record_outcomes --
# The fenced outcome: a row changes only if it is still running under the very token the outcome
# was produced with. A stale token (the run was taken over) matches nothing and is never applied;
# the caller counts it as FenceRejected. The history entry is stamped from the row itself, so it
# names the attempt, token and owner that actually held the run.
_RECORD_OUTCOMES = compose(
    """
UPDATE {schema}.runs AS r SET
    state            = u.state,
    result           = u.result::jsonb,
    error            = u.error::jsonb,
    history          = CASE WHEN u.entry IS NULL THEN r.history ELSE r.history || jsonb_build_array(
                           u.entry::jsonb || jsonb_build_object(
                               'attempt', r.attempt, 'fence_token', r.fence_token,
                               'owner', coalesce(r.owner, ''), 'started_at', r.started_at,
                               'finished_at', now())) END,
    finished_at      = now(),
    lease_expires_at = NULL,
    -- attempt - round_start + 1 is the attempt within the budget: moving both keeps it unchanged.
    round_start      = r.round_start + u.refund,
    held_reason      = u.held_reason,
    updated_at       = now()
  FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[],
              $8::text[])
       AS u(run_id, token, state, result, error, entry, refund, held_reason)
 WHERE r.run_id = u.run_id AND r.fence_token = u.token AND r.state = 'running'
RETURNING {run_columns}
""",
    run_columns=_RUN_COLUMNS,
)


async def record_outcomes(conn: Conn, schema: str, writes: Sequence[OutcomeWrite]) -> list[Run]:
    """Apply outcomes whose token is current; returns the rows changed (the others were rejected).

    The returned runs carry the JobDue record of the run each write names (it cannot change while
    the run is running under that token).
    """
    if not writes:
        return []
    rows = await conn.fetch(
        sql(_RECORD_OUTCOMES, schema),
        [w.run_id for w in writes],
        [w.fence_token for w in writes],
        [w.state for w in writes],
        [w.result for w in writes],
        [w.error for w in writes],
        [w.entry for w in writes],
        [w.refund for w in writes],
        [w.held_reason for w in writes],
    )
    records = {w.run_id: w.due for w in writes}
    return [Run(row, records[row["run_id"]]) for row in rows]


# start_buffered --
# Starts the buffered runs of each job whose previous run left 'running', oldest first (arrival,
# then slot: one intake transaction stamps a whole backfill with the same created_at), while fewer
# than the buffered run's max_concurrent run (1 for buffer_one, so one start when none runs).
# The callers hold the jobs' locks, so an intake deciding a new run's overlap for the same job
# waits and then sees these starts.
_START_BUFFERED = """
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
       updated_at = now()
  FROM next
 WHERE r.run_id = next.run_id
RETURNING r.*
"""


async def start_buffered(
    conn: Conn, schema: str, job_ids: Sequence[str], *, owner: str, ttl: float
) -> list[Run]:
    if not job_ids:
        return []
    rows = await conn.fetch(sql(_START_BUFFERED, schema), list(job_ids), owner, ttl)
    return [Run.from_row(row) for row in rows]


# reap --
# Takes over runs whose lease expired by the database clock: SKIP LOCKED so several reapers split
# the work, and the token goes up so the previous owner's late writes bounce. The attempt stays:
# the handler runs again for the same attempt, and the takeover is written into the history. A
# lease that lapsed (not released at shutdown) counts in lease_lapses, which bounds how often one
# run may take a claimer down with it.
_REAP = """
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
"""


async def reap(conn: Conn, schema: str, *, owner: str, ttl: float, limit: int) -> list[Run]:
    rows = await conn.fetch(sql(_REAP, schema), limit, owner, ttl)
    return [Run.from_row(row) for row in rows]


# Buffered for a while (database clock) with nothing of the job running: its start was lost.
_ORPHANED_BUFFERS = """
SELECT DISTINCT p.job_id FROM {schema}.runs p
 WHERE p.state = 'pending' AND p.updated_at < now() - make_interval(secs => $1)
   AND NOT EXISTS (SELECT 1 FROM {schema}.runs l WHERE l.job_id = p.job_id AND l.state = 'running')
 LIMIT $2
"""


async def orphaned_buffers(conn: Conn, schema: str, *, older_than: float, limit: int) -> list[str]:
    """Jobs with a buffered run but nothing running: the start after the last run was lost."""
    rows = await conn.fetch(
        sql(_ORPHANED_BUFFERS, schema),
        older_than,
        limit,
    )
    return [row["job_id"] for row in rows]


# Only the token's holder releases: a run taken over meanwhile is left to its new owner.
_RELEASE = """
UPDATE {schema}.runs AS r SET lease_expires_at = now(), lease_released = $3, updated_at = now()
  FROM unnest($1::text[], $2::bigint[]) AS h(run_id, token)
 WHERE r.run_id = h.run_id AND r.fence_token = h.token AND r.state = 'running'
"""


async def release(conn: Conn, schema: str, tokens: Mapping[str, int], *, graceful: bool = True) -> int:
    """Expire leases now, so another claimer's reaper takes them over at once.

    ``graceful``: released at shutdown, so the takeover is not a lapse. A run whose task ended
    without an outcome is released with ``graceful=False``: that counts towards its quarantine.
    Only the token's holder releases (a taken-over run is left alone).
    """
    if not tokens:
        return 0
    status = await conn.execute(
        sql(_RELEASE, schema),
        list(tokens),
        list(tokens.values()),
        graceful,
    )
    return int(status.split()[-1])


# reopen --
# A schedule's dead-lettered run, reopened for a redrive (docs/decisions/0009), once per redrive
# number: only while it is dead-lettered, a schedule's (an activity's run is its workflow's to
# retry), its number above the row's, and its stored JobDue the very record the letter points at
# (a letter naming another position reopens nothing). It becomes `retrying` with a fresh attempt
# budget (round_start past its last attempt) and its lease lapses forgotten; the caller stages the
# retry timer of its next attempt, whose JobDue (the stored one) is claimed with the next token.
_REOPEN = """
UPDATE {schema}.runs AS r
   SET state = 'retrying', round_start = r.attempt + 1, redrive_count = $2, lease_lapses = 0,
       lease_released = false, held_reason = NULL, updated_at = now()
 WHERE r.run_id = $1 AND r.state = 'dead_lettered' AND r.workflow_id IS NULL AND r.redrive_count < $2
   AND r.due_topic = $3 AND r.due_partition = $4 AND r.due_offset = $5
RETURNING r.*
"""
# What a refused reopen is told: the row as it stands (read in the same transaction).
_REOPEN_REFUSAL = """
SELECT state, workflow_id, redrive_count, due_topic, due_partition, due_offset
  FROM {schema}.runs WHERE run_id = $1
"""


@dataclass(frozen=True, slots=True)
class Reopened:
    """A reopened run, or why it was not."""

    run: Run | None
    refusal: str = ""


async def reopen(
    conn: Conn, schema: str, *, run_id: str, redrive: int, topic: str, partition: int, offset: int
) -> Reopened:
    """Reopen the dead-lettered run ``run_id`` for redrive number ``redrive`` (see `_REOPEN`)."""
    row = await conn.fetchrow(sql(_REOPEN, schema), run_id, redrive, topic, partition, offset)
    if row is not None:
        return Reopened(Run.from_row(row))
    found = await conn.fetchrow(sql(_REOPEN_REFUSAL, schema), run_id)
    if found is None:
        return Reopened(
            None, f"no run {run_id!r} at the claimer (never claimed, or purged after its retention)"
        )
    if found["workflow_id"] is not None:
        return Reopened(
            None,
            f"run {run_id!r} is an activity of workflow {found['workflow_id']!r}: retry it through the workflow",
        )
    if found["state"] != "dead_lettered":
        return Reopened(None, f"run {run_id!r} is {found['state']}, not dead-lettered: nothing to redrive")
    stored = f"{found['due_topic']}:{found['due_partition']}:{found['due_offset']}"
    if stored != f"{topic}:{partition}:{offset}":
        return Reopened(
            None,
            f"the letter points at {topic}:{partition}:{offset}, but run {run_id!r} was dead-lettered from "
            f"the JobDue at {stored}: the letter is not this run's",
        )
    return Reopened(
        None, f"run {run_id!r} was redriven already (redrive {found['redrive_count']}, this is {redrive})"
    )


# reruns_issued --
# Whether the ticker recorded each (job, slot, re-run number, forced) a re-run's JobDue claims,
# asked through the ticker's own function (`{schema}` is the ticker's schema here): the row is
# written in the transaction that staged the JobDue, so a genuine re-run is always found, and the
# claimer needs no right on the ticker's tables to ask.
_RERUNS_ISSUED = """
SELECT {schema}.rerun_issued(w.job_id, w.slot, w.number, w.forced) AS issued
  FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bool[]) WITH ORDINALITY
       AS w(job_id, slot, number, forced, position)
 ORDER BY w.position
"""


async def reruns_issued(
    conn: Conn, ticker_schema: str, claims: Sequence[tuple[str, datetime, int, bool]]
) -> list[bool]:
    """For each (job id, slot, re-run number, forced): whether the ticker issued that re-run."""
    rows = await conn.fetch(
        sql(_RERUNS_ISSUED, ticker_schema),
        [c[0] for c in claims],
        [c[1] for c in claims],
        [c[2] for c in claims],
        [c[3] for c in claims],
    )
    return [bool(r["issued"]) for r in rows]
