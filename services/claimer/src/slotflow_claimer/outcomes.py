"""Recording what a run's attempt came to: one fenced transaction per batch of outcomes.

Per batch, in one transaction: the fenced state change of every run (`store.record_outcomes`),
the outbox records that describe it (RunCompleted; RunFailed plus RunRetrying and the retry's
StartTimer; RunFailed plus RunDeadLettered and the DLQ record), and the start of any buffered run
whose job just became free. An outcome whose token is stale changes nothing and stages nothing:
it is counted as FenceRejected and logged.
"""

import asyncio
import functools
import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic_core import to_jsonable_python

from slotflow import tracing
from slotflow.contracts.codec import FIELD_MAX_DEPTH, depth_of
from slotflow.contracts.workflows import payload_ref
from slotflow.core.nul import jsonb_text, storable
from slotflow.errors import SlotflowError
from slotflow.pg.outbox import Encoded, Staged, append_grouped, encoded, with_headers
from slotflow.pg.payloads import put_payload
from slotflow.pg.pool import Conn, Pool
from slotflow_claimer import store
from slotflow_claimer.events import TRACE_SCOPE, RunEvents
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.retrying import with_storage_retry
from slotflow_claimer.runs import Run

log = logging.getLogger(__name__)

_MESSAGE_CHARS = 2000
#: The first event an outcome stages (its span's `slotflow.message.type`); failures: RunFailed.
_TYPES = {"completed": "RunCompleted", "held": "RunRetrying"}
_TRACEBACK_CHARS = 16000
#: A handler's result is recorded whole up to this size (as JSON); past it, a truncation marker.
#: Under the 1 MiB run-events record with room for the envelope: a workflow activity's result
#: of a few hundred kB must reach the orchestrator whole (it stores it by reference there).
RESULT_MAX_BYTES = 768 * 1024
#: A workflow activity's result larger than RESULT_MAX_BYTES is stored in the claimer's payload
#: table, in the outcome's own transaction, and RunCompleted carries a reference to it
#: (`{"$slotflow_payload": "sha256:…", "bytes": N}`); up to this size, past it a truncation marker.
ACTIVITY_RESULT_MAX_BYTES = 64 * 1024 * 1024
#: A result nests at most this deep: RunCompleted's data is level 1 and the result sits in it, so
#: the message stays within the one limit every consumer decodes (`codec.MAX_DEPTH`).
RESULT_MAX_DEPTH = FIELD_MAX_DEPTH
_PREVIEW_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt came to, with the token it ran under."""

    run: Run
    kind: str  # completed | failed | cancelled | held (waits for a downstream, attempt given back)
    result: Any = None
    error: BaseException | None = None
    #: For failures: the wait before the next attempt, or None to dead-letter.
    delay: timedelta | None = None
    #: For failures that are not retried: permanent_error, attempts_exhausted or unknown_handler.
    dlq_reason: str | None = None
    retryable: bool = False
    #: For held runs: why and for which downstream ("circuit_open:bank-api").
    held_reason: str | None = None
    #: What the handler logged during the attempt (bounded, see `capture`); sent in its event.
    logs: tuple[str, ...] = ()
    #: The attempt's last heartbeat details (JSON) not yet written: recorded with the outcome.
    heartbeat_details: str | None = None

    def write(self, *, result: str | None = None) -> store.OutcomeWrite:
        """The fenced write; ``result``: the JSON recorded for a completed run (default inline)."""
        run = self.run
        if self.kind == "completed":
            result = result if result is not None else recordable_result(self.result)
            return store.OutcomeWrite(
                run.run_id,
                run.fence_token,
                "completed",
                result=result,
                due=run.due,
                heartbeat_details=self.heartbeat_details,
            )
        if self.kind == "cancelled":
            entry = {"event": "cancelled", "error_type": "RunCancelled", "message": _cancel_message(run)}
            return store.OutcomeWrite(
                run.run_id,
                run.fence_token,
                "cancelled",
                entry=jsonb_text(entry),
                due=run.due,
                heartbeat_details=self.heartbeat_details,
            )
        error = self.error or RuntimeError("unknown failure")
        summary = {"error_type": storable(type(error).__name__), "message": _message(error)}
        if self.kind == "held":
            # The attempt is given back (refund): waiting on a downstream spends none of the budget.
            entry = {"event": "held", **summary, "reason": self.held_reason or "circuit_open"}
            return store.OutcomeWrite(
                run.run_id,
                run.fence_token,
                "retrying",
                error=jsonb_text({**summary, "reason": self.held_reason}),
                entry=jsonb_text(entry),
                due=run.due,
                refund=1,
                held_reason=self.held_reason,
                heartbeat_details=self.heartbeat_details,
            )
        state = "retrying" if self.delay is not None else "dead_lettered"
        if state == "dead_lettered":
            summary["reason"] = self.dlq_reason or "permanent_error"
        entry = {"event": "failed", **summary}
        return store.OutcomeWrite(
            run.run_id,
            run.fence_token,
            state,
            error=jsonb_text(summary),
            entry=jsonb_text(entry),
            due=run.due,
            heartbeat_details=self.heartbeat_details,
        )


def _plain(outcome: Outcome) -> Outcome:
    """The outcome with its result or error reduced to plain text the database cannot refuse."""
    if outcome.kind == "completed":
        return Outcome(
            outcome.run,
            "completed",
            result={"unrecordable_result": repr(outcome.result)[:2000]},
            logs=outcome.logs,
            heartbeat_details=outcome.heartbeat_details,
        )
    if outcome.error is None:
        return outcome
    plain = RuntimeError(f"{type(outcome.error).__name__}: {_message(outcome.error)!r}")
    return Outcome(
        outcome.run,
        outcome.kind,
        error=plain,
        delay=outcome.delay,
        dlq_reason=outcome.dlq_reason,
        retryable=outcome.retryable,
        held_reason=outcome.held_reason,
        logs=outcome.logs,
        heartbeat_details=outcome.heartbeat_details,
    )


async def activity_result(conn: Conn, *, schema: str, value: Any) -> str:
    """A workflow activity's result as recorded and sent in RunCompleted: inline up to
    RESULT_MAX_BYTES; larger, stored once in ``schema``'s payload table in the caller's transaction
    (so it commits with the outcome) and replaced by its reference, which the orchestrator
    resolves; past ACTIVITY_RESULT_MAX_BYTES, or too deep, the truncation marker as for any run."""
    text = result_json(value)
    if len(text) <= RESULT_MAX_BYTES:
        return text
    if len(text) > ACTIVITY_RESULT_MAX_BYTES:
        return capped_result(text, ACTIVITY_RESULT_MAX_BYTES)
    data = text.encode()  # jsonb_text escapes everything outside ASCII
    ref = await put_payload(conn, schema=schema, data=data)
    return jsonb_text(payload_ref(ref, len(data)))


def recordable_result(value: Any) -> str:
    """A handler's return value as the JSON text recorded and sent in RunCompleted.

    Too deep or too large for what its consumers decode, it is replaced by a truncation marker
    (`capped_result`): the run did complete, and a result no one can read must neither park its
    RunCompleted (a workflow would never see its activity finish) nor leave the run unrecorded
    (it would be taken over and run again).
    """
    return capped_result(result_json(value))


def result_json(value: Any) -> str:
    """A handler's return value as JSON text, or the too-deep marker in its place."""
    try:
        jsonable = to_jsonable_python(value, fallback=str)
    except ValueError:  # deeper than the serialiser itself goes (about 255 levels)
        return _too_deep(depth=None, preview="")
    depth = depth_of(jsonable)
    if depth > RESULT_MAX_DEPTH:
        return _too_deep(depth=depth, preview=jsonb_text(jsonable)[:_PREVIEW_CHARS])
    return jsonb_text(jsonable)


def _too_deep(*, depth: int | None, preview: str) -> str:
    how_deep = f"{depth} levels deep" if depth is not None else "too many levels deep to serialise"
    marker = {
        "slotflow_result_truncated": True,
        "reason": f"the result is nested {how_deep}; the limit is {RESULT_MAX_DEPTH} (RESULT_MAX_DEPTH)",
        "depth": depth,
        "limit_depth": RESULT_MAX_DEPTH,
        "preview": preview,
    }
    return jsonb_text(marker)


def capped_result(text: str, limit: int = RESULT_MAX_BYTES) -> str:
    """``text`` (a result's JSON) if within ``limit`` bytes, else a truncation marker in its place.

    The result travels in RunCompleted; one past what its topic takes could never be published
    (issue 23: a 2,000,484-byte RunCompleted stalled the outbox). The run still completed, so it
    is not failed (a retry would repeat its effect): the marker says the result was too large,
    how large, and keeps its start for a person to recognise. Large results go by reference (a
    row or object the handler writes, named in a small result).
    """
    # jsonb_text escapes everything outside ASCII, so characters are bytes here.
    if len(text) <= limit:
        return text
    marker = {
        "slotflow_result_truncated": True,
        "size_bytes": len(text),
        "limit_bytes": limit,
        "preview": text[:_PREVIEW_CHARS],
    }
    return jsonb_text(marker)


def _message(error: BaseException) -> str:
    # Storable: it travels in RunFailed, whose consumers refuse a NUL or a lone surrogate (the
    # acceptance rule), and a handler's exception may carry any text.
    return storable((str(error) or type(error).__name__)[:_MESSAGE_CHARS])


def _traceback(error: BaseException) -> str:
    return storable("".join(traceback.format_exception(error))[-_TRACEBACK_CHARS:])


def _cancel_message(run: Run) -> str:
    if run.workflow_id is not None:
        return f"cancelled by workflow {run.workflow_id}: it no longer waits on activity {run.sequence}"
    return f"cancelled by overlap policy {run.overlap}: a newer run of {run.job_id} replaced it"


class RunCancelled(SlotflowError):
    """The run was cancelled: a newer run of its job replaced it (cancel_previous), or its workflow
    no longer waits on it (an activity's run: CancelActivity)."""


SettledHook = Callable[[Sequence[Outcome], Sequence[Run]], None]


class OutcomeWriter:
    """Collects outcomes from finished handlers and records them in batches."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        owner: str,
        lease_ttl: float,
        events: RunEvents,
        metrics: ClaimerMetrics,
        batch: int,
        on_settled: SettledHook,
        wake_relay: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._ttl = lease_ttl
        self._events = events
        self._metrics = metrics
        self._batch = batch
        self._on_settled = on_settled
        self._wake_relay = wake_relay
        self._queue: asyncio.Queue[Outcome] = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, outcome: Outcome) -> None:
        self._idle.clear()
        self._queue.put_nowait(outcome)

    async def wait_idle(self) -> None:
        """Until every submitted outcome is recorded (or rejected)."""
        await self._idle.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Record outcomes until ``stop`` is set and the queue is empty."""
        while not (stop.is_set() and self._queue.empty()):
            try:
                first = await asyncio.wait_for(self._queue.get(), timeout=0.2)
            except TimeoutError:
                continue
            items = [first]
            while len(items) < self._batch and not self._queue.empty():
                items.append(self._queue.get_nowait())
            # Storage outages are waited out: these runs hold leases we keep renewing meanwhile.
            try:
                started = await with_storage_retry(
                    functools.partial(self.write_batch, items), what="record outcomes"
                )
            except Exception as err:  # noqa: BLE001 - one unrecordable outcome must not stop the others
                log.error("claimer: outcome batch refused (%r); recording one by one", err)
                started = await self._write_each(items)
            self._wake_relay()
            self._on_settled(items, started)
            if self._queue.empty():
                self._idle.set()

    async def _write_each(self, items: Sequence[Outcome]) -> list[Run]:
        started: list[Run] = []
        for outcome in items:
            for attempt in (outcome, _plain(outcome)):
                try:
                    started += await with_storage_retry(
                        functools.partial(self.write_batch, [attempt]), what="record an outcome"
                    )
                    break
                except Exception as err:  # noqa: BLE001 - try the plain form, then give up loudly
                    log.error(
                        "claimer: cannot record %s of run %s: %r", attempt.kind, attempt.run.run_id, err
                    )
        return started

    async def write_batch(self, items: Sequence[Outcome]) -> list[Run]:
        """One transaction: fenced outcome writes, their events, buffered starts. Returns starts."""
        schema = self._schema
        async with self._pool.acquire() as conn, conn.transaction():
            guarded = {o.run.job_id for o in items if o.run.overlap != "allow"}
            await store.lock_jobs(conn, guarded)
            writes = [await self._write(conn, o) for o in items]
            applied = {run.run_id: run for run in await store.record_outcomes(conn, schema, writes)}
            staged: list[Encoded] = []
            freed: list[str] = []
            rejected: list[Outcome] = []
            for outcome in items:
                run = applied.get(outcome.run.run_id)
                if run is None:
                    rejected.append(outcome)
                    continue
                staged.extend(self._stage(outcome, run))
                if run.overlap != "allow":
                    freed.append(run.job_id)
            started = await store.start_buffered(conn, schema, freed, owner=self._owner, ttl=self._ttl)
            for run in started:
                staged.append(self._events.started_row(run, run.updated_at))
            # Each event goes with a fenced write or a claim, made once: they travel grouped.
            await append_grouped(conn, schema=schema, rows=staged)
        for outcome in rejected:
            self._metrics.fence_rejected.labels("outcome").inc()
            log.warning(
                "FenceRejected: %s outcome of run %s with token %d not applied (taken over or finished)",
                outcome.kind,
                outcome.run.run_id,
                outcome.run.fence_token,
            )
        for outcome in items:
            if outcome.run.run_id in applied:
                self._count(outcome)
        self._metrics.claimed.labels("buffered").inc(len(started))
        return started

    async def _write(self, conn: Conn, outcome: Outcome) -> store.OutcomeWrite:
        if outcome.kind == "completed" and outcome.run.kind == "activity":
            # A payload row of an outcome whose token turns out stale stays: content-addressed,
            # it is the same row a later put of those bytes would write.
            return outcome.write(
                result=await activity_result(conn, schema=self._schema, value=outcome.result)
            )
        return outcome.write()

    def _stage(self, outcome: Outcome, run: Run) -> list[Encoded]:
        at = run.updated_at
        if outcome.kind == "completed":
            rows = [self._events.completed_row(run, at, logs=outcome.logs)]
        else:
            rows = [encoded(item) for item in self._stage_failure(outcome, run, at)]
        if not tracing.enabled() or not rows:
            return rows
        # The outcome's event (RunCompleted, RunFailed, ...) under the handler's span.
        first = rows[0]
        created = tracing.produced(
            TRACE_SCOPE,
            first.topic,
            message_id=first.event_id,
            key=first.key,
            parent=outcome.run.trace_parent(),
            attributes={
                **tracing.run_attributes(
                    run_id=run.run_id,
                    job_id=run.job_id,
                    attempt=run.attempt,
                    kind=run.kind,
                    handler=run.handler,
                    workflow_id=run.workflow_id,
                ),
                "slotflow.outcome": outcome.kind,
                "slotflow.message.type": _TYPES.get(outcome.kind, "RunFailed"),
            },
        )
        return [with_headers(row, created) for row in rows]

    def _stage_failure(self, outcome: Outcome, run: Run, at: datetime) -> list[Staged]:
        ev = self._events
        if outcome.kind == "cancelled":
            error: BaseException = RunCancelled(_cancel_message(run))
            return [
                ev.failed(
                    run, at, error_type="RunCancelled", message=str(error), traceback="", retryable=False
                )
            ]
        if outcome.kind == "held":
            # No RunFailed: nothing was spent. The durable timer brings the run back.
            wait = outcome.delay or timedelta(seconds=1)
            return [
                ev.retrying(run, at, retry_at=at + wait, delay=wait, held_reason=outcome.held_reason),
                ev.retry_timer(run, at, retry_at=at + wait),
            ]
        error = outcome.error or RuntimeError("unknown failure")
        failed = ev.failed(
            run,
            at,
            error_type=storable(type(error).__name__),
            message=_message(error),
            traceback=_traceback(error),
            # The error's kind, not whether it is retried: a transient error that ran out of
            # attempts stays retryable (a redrive may succeed); RunRetrying/RunDeadLettered say the rest.
            retryable=outcome.retryable,
            logs=outcome.logs,
        )
        if outcome.delay is not None:
            retry_at: datetime = at + outcome.delay
            return [
                failed,
                ev.retrying(run, at, retry_at=retry_at, delay=outcome.delay),
                ev.retry_timer(run, at, retry_at=retry_at),
            ]
        return [
            failed,
            *ev.dead_lettered(run, at, reason=outcome.dlq_reason or "permanent_error", error=error),
        ]

    def _count(self, outcome: Outcome) -> None:
        counted = self._metrics.outcomes
        if outcome.kind == "completed":
            counted.labels("completed", "").inc()
        elif outcome.kind == "cancelled":
            counted.labels("cancelled", "").inc()
        elif outcome.kind == "held":
            # The reason without its downstream ("circuit_open:bank-api"): downstream_held has both.
            counted.labels("held", (outcome.held_reason or "circuit_open").split(":", 1)[0]).inc()
        elif outcome.delay is not None:
            counted.labels("retrying", "").inc()
        else:
            counted.labels("dead_lettered", outcome.dlq_reason or "permanent_error").inc()
