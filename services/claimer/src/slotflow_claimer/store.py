"""The functions that run the statements on `runs` (`sql.py` holds them, each with the invariant it
protects). All take ``conn`` and run inside the caller's transaction; every time decision uses the
database clock (`now()`).

The fence: every claim raises `fence_token` by one and every write that changes a running run's
fate names the token it was claimed with. A claimer that lost its run (paused past its lease,
partitioned away) carries an old token, so its writes match no row and change nothing.
"""

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from slotflow.contracts import CancelActivity, RetryPolicy
from slotflow.core.nul import jsonb_text
from slotflow.issuers import CancelTarget
from slotflow.kafka.records import Record
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql
from slotflow_claimer.runs import Due, Run
from slotflow_claimer.sql import (
    ACTIVE_RUNS,
    ACTIVITY_CANCEL_ISSUED,
    CANCEL_ACTIVITY,
    CANCEL_TARGET,
    CLAIM,
    EXCUSE_LAPSES,
    EXISTING_RUN_IDS,
    HEARTBEAT,
    INSERT_UNSTARTED,
    ORPHANED_BUFFERS,
    REAP,
    RECORD_ACTIVITY_CANCEL,
    RECORD_HEARTBEAT,
    RECORD_OUTCOMES,
    RELEASE,
    REOPEN,
    REOPEN_REFUSAL,
    REQUEST_CANCEL,
    RERUNS_ISSUED,
    START_BUFFERED,
    SUPERSEDE_PENDING,
    TIME_OUT_SILENT,
)


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


async def claim(conn: Conn, schema: str, dues: Sequence[Due], *, owner: str, ttl: float) -> list[Run]:
    """Claim the runs of ``dues`` (unique run ids) for ``owner``; returns those claimed."""
    if not dues:
        return []
    rows = await conn.fetch(sql(CLAIM, schema), *_due_arrays(dues), owner, ttl)
    records = {due.job.run_id: due.record for due in dues}
    return [Run(row, records[row["run_id"]]) for row in rows]


@dataclass(frozen=True, slots=True)
class Unstarted:
    due: Due
    state: str  # skipped | pending
    reason: str


async def insert_unstarted(conn: Conn, schema: str, items: Sequence[Unstarted], *, owner: str) -> list[Run]:
    if not items:
        return []
    rows = await conn.fetch(
        sql(INSERT_UNSTARTED, schema),
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


async def existing_run_ids(conn: Conn, schema: str, run_ids: Sequence[str]) -> set[str]:
    rows = await conn.fetch(sql(EXISTING_RUN_IDS, schema), run_ids)
    return {row["run_id"] for row in rows}


async def active_runs(conn: Conn, schema: str, job_ids: Sequence[str]) -> list[Active]:
    """Running (any lease: an expired one will be taken over, so it still runs) and buffered runs."""
    rows = await conn.fetch(sql(ACTIVE_RUNS, schema), job_ids)
    return [Active(row["run_id"], row["job_id"], row["state"]) for row in rows]


async def request_cancel(conn: Conn, schema: str, run_ids: Sequence[str]) -> list[str]:
    """Ask the owners of running runs to cancel them; their next heartbeat sees the flag."""
    rows = await conn.fetch(sql(REQUEST_CANCEL, schema), run_ids)
    return [row["run_id"] for row in rows]


async def supersede_pending(
    conn: Conn, schema: str, run_ids: Sequence[str], *, owner: str, reason: str
) -> list[Run]:
    """Skip buffered runs a newer run replaces (cancel_previous); deciding their fate is a claim."""
    rows = await conn.fetch(
        sql(SUPERSEDE_PENDING, schema),
        run_ids,
        owner,
        reason,
    )
    return [Run.from_row(row) for row in rows]


async def heartbeat(
    conn: Conn, schema: str, tokens: Mapping[str, int], *, owner: str, ttl: float
) -> dict[str, bool]:
    """Renew leases; returns run id -> cancel requested, for the runs still held."""
    if not tokens:
        return {}
    rows = await conn.fetch(sql(HEARTBEAT, schema), list(tokens), list(tokens.values()), owner, ttl)
    return {row["run_id"]: row["cancel_requested"] for row in rows}


async def excuse_lapses(conn: Conn, schema: str, tokens: Mapping[str, int], *, owner: str) -> int:
    """Excuse the lapses of runs ``owner`` lost because the database was unreachable (EXCUSE_LAPSES):
    run id -> the token it held. Returns how many rows changed."""
    if not tokens:
        return 0
    status = await conn.execute(sql(EXCUSE_LAPSES, schema), list(tokens), list(tokens.values()), owner)
    return int(status.split()[-1])


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
    #: JSON: the attempt's last heartbeat details not yet written (None: the recorded ones stay).
    heartbeat_details: str | None = None


async def record_outcomes(conn: Conn, schema: str, writes: Sequence[OutcomeWrite]) -> list[Run]:
    """Apply outcomes whose token is current; returns the rows changed (the others were rejected).

    The returned runs carry the JobDue record of the run each write names (it cannot change while
    the run is running under that token).
    """
    if not writes:
        return []
    rows = await conn.fetch(
        sql(RECORD_OUTCOMES, schema),
        [w.run_id for w in writes],
        [w.fence_token for w in writes],
        [w.state for w in writes],
        [w.result for w in writes],
        [w.error for w in writes],
        [w.entry for w in writes],
        [w.refund for w in writes],
        [w.held_reason for w in writes],
        [w.heartbeat_details for w in writes],
    )
    records = {w.run_id: w.due for w in writes}
    return [Run(row, records[row["run_id"]]) for row in rows]


async def start_buffered(
    conn: Conn, schema: str, job_ids: Sequence[str], *, owner: str, ttl: float
) -> list[Run]:
    if not job_ids:
        return []
    rows = await conn.fetch(sql(START_BUFFERED, schema), list(job_ids), owner, ttl)
    return [Run.from_row(row) for row in rows]


async def reap(conn: Conn, schema: str, *, owner: str, ttl: float, limit: int) -> list[Run]:
    rows = await conn.fetch(sql(REAP, schema), limit, owner, ttl)
    return [Run.from_row(row) for row in rows]


@dataclass(frozen=True, slots=True)
class Silent:
    """A run whose attempt missed its heartbeat deadline, now held with the next token."""

    run: Run
    #: The claimer that went silent running it.
    owner: str | None


async def time_out_silent(
    conn: Conn, schema: str, *, owner: str, ttl: float, limit: int, grace: float
) -> list[Silent]:
    """Take the runs whose heartbeat deadline passed ``grace`` seconds ago (TIME_OUT_SILENT), for
    ``owner`` to record their attempts' failure."""
    rows = await conn.fetch(sql(TIME_OUT_SILENT, schema), limit, owner, ttl, grace)
    return [Silent(Run.from_row(row), row["silent_owner"]) for row in rows]


@dataclass(frozen=True, slots=True)
class HeartbeatRecorded:
    """An activity heartbeat was recorded; whether the run's cancellation was asked for."""

    cancel_requested: bool


async def record_heartbeat(
    conn: Conn, schema: str, *, run_id: str, token: int, details: str | None, timeout: float | None
) -> HeartbeatRecorded | None:
    """Record an activity heartbeat under ``token`` (RECORD_HEARTBEAT): ``details`` as JSON (None:
    the recorded ones stay), the deadline ``timeout`` seconds on. None: refused, the token is stale."""
    row = await conn.fetchrow(sql(RECORD_HEARTBEAT, schema), run_id, token, details, timeout)
    return None if row is None else HeartbeatRecorded(bool(row["cancel_requested"]))


async def orphaned_buffers(conn: Conn, schema: str, *, older_than: float, limit: int) -> list[str]:
    """Jobs with a buffered run but nothing running: the start after the last run was lost."""
    rows = await conn.fetch(
        sql(ORPHANED_BUFFERS, schema),
        older_than,
        limit,
    )
    return [row["job_id"] for row in rows]


async def release(conn: Conn, schema: str, tokens: Mapping[str, int], *, graceful: bool = True) -> int:
    """Expire leases now, so another claimer's reaper takes them over at once.

    ``graceful``: released at shutdown, so the takeover is not a lapse. A run whose task ended
    without an outcome is released with ``graceful=False``: that counts towards its quarantine.
    Only the token's holder releases (a taken-over run is left alone).
    """
    if not tokens:
        return 0
    status = await conn.execute(
        sql(RELEASE, schema),
        list(tokens),
        list(tokens.values()),
        graceful,
    )
    return int(status.split()[-1])


@dataclass(frozen=True, slots=True)
class Reopened:
    """A reopened run, or why it was not."""

    run: Run | None
    refusal: str = ""


async def reopen(
    conn: Conn, schema: str, *, run_id: str, redrive: int, topic: str, partition: int, offset: int
) -> Reopened:
    """Reopen the dead-lettered run ``run_id`` for redrive number ``redrive`` (see `REOPEN`)."""
    row = await conn.fetchrow(sql(REOPEN, schema), run_id, redrive, topic, partition, offset)
    if row is not None:
        return Reopened(Run.from_row(row))
    found = await conn.fetchrow(sql(REOPEN_REFUSAL, schema), run_id)
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


async def reruns_issued(
    conn: Conn, ticker_schema: str, claims: Sequence[tuple[str, datetime, int, bool]]
) -> list[bool]:
    """For each (job id, slot, re-run number, forced): whether the ticker issued that re-run."""
    rows = await conn.fetch(
        sql(RERUNS_ISSUED, ticker_schema),
        [c[0] for c in claims],
        [c[1] for c in claims],
        [c[2] for c in claims],
        [c[3] for c in claims],
    )
    return [bool(r["issued"]) for r in rows]


async def activity_cancel_issued(
    conn: Conn, orchestrator_schema: str, workflow_id: str, sequence: int
) -> bool:
    """Whether the orchestrator recorded the cancel of ``workflow_id``'s activity at ``sequence``
    (its `activity_cancel_issued`, ACTIVITY_CANCEL_ISSUED)."""
    issued = await conn.fetchval(sql(ACTIVITY_CANCEL_ISSUED, orchestrator_schema), workflow_id, sequence)
    return issued is True


async def cancel_target(conn: Conn, schema: str, run_id: str) -> CancelTarget | None:
    """The claimer's row of the run a cancel names, as its issuer check reads it (None: no row)."""
    row = await conn.fetchrow(sql(CANCEL_TARGET, schema), run_id)
    if row is None:
        return None
    return CancelTarget(
        run_id=row["run_id"],
        kind=row["kind"],
        workflow_id=row["workflow_id"],
        sequence=row["sequence"],
        handler=row["handler"],
        state=row["state"],
    )


@dataclass(frozen=True, slots=True)
class ActivityCancelled:
    """What a CancelActivity did to the run it names (CANCEL_ACTIVITY)."""

    #: The run as it is now (None: nothing changed: no row yet, ended already, or flagged before).
    run: Run | None
    #: Its state before: `running` (flagged: its claimer cancels the handler), `retrying` or
    #: `pending` (ended `cancelled` here); None when nothing changed.
    was: str | None


async def cancel_activity(
    conn: Conn, schema: str, cancel: CancelActivity, *, message: str, owner: str
) -> ActivityCancelled:
    """Record ``cancel`` and apply it to its run (CANCEL_ACTIVITY); in the caller's transaction,
    after the caller checked it (`slotflow.issuers.cancel_verdict`)."""
    await conn.execute(
        sql(RECORD_ACTIVITY_CANCEL, schema), cancel.run_id, cancel.workflow_id, cancel.sequence, cancel.reason
    )
    row = await conn.fetchrow(
        sql(CANCEL_ACTIVITY, schema), cancel.run_id, cancel.workflow_id, cancel.sequence, message, owner
    )
    if row is None:
        return ActivityCancelled(None, None)
    return ActivityCancelled(Run.from_row(row), row["was"])
