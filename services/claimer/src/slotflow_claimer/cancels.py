"""A workflow's cancel of its activity: the claimer's side (docs/claimer.md, "Cancelling a workflow
activity").

The orchestrator stages a `CancelActivity` on the internal topic `activities.cancels` (only it may
write there) when a workflow no longer waits on an activity's run: the workflow was cancelled,
terminated, timed out or ended otherwise, or its code cancelled the activity. The claimers consume
it in a group of their own, one record at a time, each in one transaction with the inbox:

1. the check (`slotflow.issuers.cancel_verdict`): the orchestrator recorded that very cancel (its
   `activity_cancel_issued`, same database), and the claimer's row for the run, if it holds one,
   is that workflow's activity at that sequence with that handler. Anything else is parked
   (`unproven_cancel`) and stops nothing: a forged record cannot stop a schedule's run or another
   workflow's;
2. the cancel is recorded once per run (`activity_cancels`: a run claimed later starts cancelled)
   and applied (`store.cancel_activity`): a running attempt is flagged, and its claimer cancels the
   handler at its next lease renewal or heartbeat write; a run waiting for its retry timer (or
   buffered) ends `cancelled` here, with a RunFailed (`RunCancelled`) and the retry timer's
   CancelTimer staged in the same transaction.
"""

import logging
from collections.abc import Callable
from datetime import datetime

from slotflow.contracts import CancelActivity
from slotflow.issuers import cancel_verdict
from slotflow.kafka.loop import Incoming
from slotflow.pg.inbox import record_once
from slotflow.pg.outbox import append_many
from slotflow.pg.pool import Pool
from slotflow_claimer import store
from slotflow_claimer.events import RunEvents
from slotflow_claimer.metrics import ClaimerMetrics

log = logging.getLogger(__name__)


def cancel_message(workflow_id: str, sequence: int | None, reason: str = "") -> str:
    """What a cancelled activity run's RunFailed and history entry say."""
    said = f": {reason}" if reason else ""
    return f"cancelled by workflow {workflow_id}: it no longer waits on activity {sequence}{said}"[:2000]


class ActivityCancels:
    """Applies CancelActivity records (the ConsumeLoop handler of one claimer)."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        orchestrator_schema: str,
        owner: str,
        events: RunEvents,
        metrics: ClaimerMetrics,
        wake_relay: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._orchestrator_schema = orchestrator_schema
        self._owner = owner
        self._events = events
        self._metrics = metrics
        self._wake = wake_relay

    async def handle(self, incoming: Incoming) -> None:
        cancel = incoming.message
        if not isinstance(cancel, CancelActivity):
            return  # unreachable: the loop accepts CancelActivity only
        async with self._pool.acquire() as conn, conn.transaction():
            if not await record_once(
                conn, schema=self._schema, event_id=incoming.envelope.id, topic=incoming.record.topic
            ):
                return
            issued = await store.activity_cancel_issued(
                conn, self._orchestrator_schema, cancel.workflow_id, cancel.sequence
            )
            target = await store.cancel_target(conn, self._schema, cancel.run_id)
            verdict = cancel_verdict(cancel, issued=issued, record=target)
            if not verdict.accepted:
                # Rolled back with the inbox row; the loop parks the record with the reason.
                log.warning("claimer: %s refused: %s", incoming.envelope.id, verdict.detail)
                raise verdict.error()
            message = cancel_message(cancel.workflow_id, cancel.sequence, cancel.reason)
            done = await store.cancel_activity(conn, self._schema, cancel, message=message, owner=self._owner)
            run = done.run
            if run is not None and done.was != "running":
                at: datetime = run.updated_at
                await append_many(
                    conn,
                    schema=self._schema,
                    items=[
                        self._events.failed(
                            run, at, error_type="RunCancelled", message=message, traceback="", retryable=False
                        ),
                        self._events.cancel_retry_timer(run, at),
                    ],
                )
        if run is not None and done.was != "running":
            self._metrics.outcomes.labels("cancelled", "").inc()
            if self._wake is not None:
                self._wake()
        log.info(
            "claimer: cancel of run %s (%s) taken: %s",
            cancel.run_id,
            cancel.reason or "no reason given",
            "no run yet, it will not start"
            if target is None
            else f"was {done.was}"
            if done.was is not None
            else f"already {target.state}",
        )
