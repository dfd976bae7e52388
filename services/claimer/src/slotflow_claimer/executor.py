"""Running handlers under a lease: heartbeats extend it, and losing it cancels the handler.

One heartbeat statement per interval renews every lease this claimer holds, each guarded by the
token it was claimed with; a run missing from the answer was taken over and its handler is
cancelled with nothing recorded. The fence, not the cancellation, makes that safe. Where handlers
run, what cancels them and when a run is quarantined: docs/claimer.md ("Where a handler runs",
"Cancellation", "Failure sorting").

A handler's own heartbeats (`ctx.heartbeat`, activity heartbeats) are another thing: each attempt's
`Pulse` (pulses.py) writes them, and a handler silent past its policy's `heartbeat_timeout` fails
its attempt here with HeartbeatTimeout (docs/claimer.md, "Heartbeats").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slotflow import tracing
from slotflow.core.retry import ATTEMPT_CEILING, is_retryable, next_retry_delay
from slotflow.errors import FenceRejected, PermanentError
from slotflow.pg.pool import Pool
from slotflow.runs import FencedWrites, Handler, HandlerRegistry, RunContext, UnknownHandler
from slotflow.runs.heartbeats import HeartbeatTimeout, silence_message
from slotflow.service import sleep_or_stop
from slotflow_claimer import capture, store
from slotflow_claimer.downstreams import Gate, Pass
from slotflow_claimer.events import TRACE_SCOPE
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.outcomes import Outcome
from slotflow_claimer.pulses import Pulse
from slotflow_claimer.retrying import STORAGE_RETRYABLE
from slotflow_claimer.runs import Run

log = logging.getLogger(__name__)


class RunQuarantined(PermanentError):
    """The run's lease lapsed too often: its handler probably kills the claimer running it."""


@dataclass(eq=False)
class Execution:
    run: Run
    renewed_at: float
    task: asyncio.Task[None] | None = None
    #: The handler is running in `task` (cancelling the task cancels the handler).
    in_handler: bool = False

    def reason(self) -> str | None:
        """Why this claimer cancelled the run (lost, cancel_requested, shutdown), if it did."""
        return self.cancel_reason

    def cancelled_on_request(self) -> bool:
        """The run's cancellation was asked for (`Executor.request_cancel`) and acted on."""
        return self.cancel_reason == "cancel_requested"

    cancel_reason: str | None = None
    #: The outcome went to the writer: from here the fence decides, not the heartbeat.
    submitted: bool = False
    #: The handler's activity heartbeats, once it was invoked.
    pulse: Pulse | None = None
    #: Set once the run's cancellation was asked for (cancel_previous, or its workflow's cancel):
    #: `ctx.is_cancelled()` reads it, and a thread handler's `ctx.heartbeat` raises CancelledError.
    cancellation: threading.Event = dataclasses.field(default_factory=threading.Event)


class Executor:
    """Holds the runs this claimer has claimed until their outcome is recorded."""

    def __init__(
        self,
        *,
        pool: Pool,
        schema: str,
        owner: str,
        lease_ttl: float,
        max_in_flight: int,
        registry: HandlerRegistry,
        handler_pool: Pool | None,
        metrics: ClaimerMetrics,
        submit: Callable[[Outcome], None],
        rng: random.Random,
        max_lease_lapses: int = 3,
        gate: Gate | None = None,
        handler_threads: int = 16,
        handler_processes: int | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._owner = owner
        self._ttl = lease_ttl
        self._max = max_in_flight
        self._registry = registry
        self._handler_pool = handler_pool
        self._metrics = metrics
        self._submit_outcome = submit
        self._rng = rng
        self._max_lapses = max_lease_lapses
        self._gate = gate
        # Their own pools, not the loop's default executor: that one also resolves host names for
        # the database and broker clients, which handler threads must not be able to starve.
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=handler_threads, thread_name_prefix="slotflow-handler"
        )
        self._process_workers = handler_processes
        self._process_pool: concurrent.futures.ProcessPoolExecutor | None = None
        #: Runs whose task ended without an outcome: run id -> token, released at the next heartbeat.
        self._orphans: dict[str, int] = {}
        #: Runs lost while the database was unreachable or this process froze, as (run id, token):
        #: their lapses are excused at the next heartbeat that reaches the database (EXCUSE_LAPSES in
        #: sql.py). One run can be lost twice before that (two outages close together), so pairs,
        #: not a map.
        self._excuses: set[tuple[str, int]] = set()
        #: When a heartbeat last failed to reach the database (monotonic), or never.
        self._storage_failed_at: float | None = None
        #: Whether this process froze since a given time (LoopWatchdog.froze_since), once watched.
        self._froze_since: Callable[[float], bool] | None = None
        self._executions: dict[str, Execution] = {}
        self._space = asyncio.Event()
        self._released: list[Execution] = []
        self._durations: dict[tuple[str, str], Any] = {}
        capture.install()

    # -- capacity -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._executions)

    def free(self) -> int:
        return max(self._max - len(self._executions), 0)

    async def wait_for_space(self, timeout: float) -> int:
        """Free slots, waiting up to ``timeout`` seconds for one; 0 when none came free."""
        if self.free() == 0:
            self._space.clear()
            try:
                await asyncio.wait_for(self._space.wait(), timeout=timeout)
            except TimeoutError:
                return 0
        return self.free()

    def _changed(self) -> None:
        self._metrics.in_flight.set(len(self._executions))
        if self.free() > 0:
            self._space.set()

    # -- running ------------------------------------------------------------------------------

    def start(self, run: Run) -> None:
        """Run ``run``'s handler (the claim is committed and RunStarted staged)."""
        self._start(run)
        self._changed()

    def start_all(self, runs: Sequence[Run]) -> None:
        """`start` for a claimed batch (the gauge and the space event are updated once)."""
        for run in runs:
            self._start(run)
        self._changed()

    def _start(self, run: Run) -> None:
        previous = self._executions.get(run.run_id)
        if previous is not None and previous.run.fence_token < run.fence_token:
            # We took over our own run (our heartbeat lapsed): the older execution is now a zombie.
            self._lose(previous, excused=self._lost_by_claimer(previous))
        execution = Execution(run, renewed_at=time.monotonic())
        self._executions[run.run_id] = execution
        task = asyncio.create_task(self._execute(execution), name=f"run {run.run_id}")
        task.add_done_callback(functools.partial(self._finished, execution))
        execution.task = task

    def _finished(self, ex: Execution, task: asyncio.Task[None]) -> None:
        """A run's task ended: if it left no outcome, stop renewing the lease and release it."""
        if task.cancelled():
            return  # abandoned at exit: the lease expires on its own
        error = task.exception()  # retrieved here, so asyncio does not log it a second time
        if ex.submitted or ex.cancel_reason is not None or self._executions.get(ex.run.run_id) is not ex:
            return
        log.error(
            "run %s token %d: its task ended without an outcome (%r); releasing the run",
            ex.run.run_id,
            ex.run.fence_token,
            error,
            exc_info=error,
        )
        ex.cancel_reason = "orphaned"
        self._orphans[ex.run.run_id] = ex.run.fence_token
        self._drop(ex)

    async def _execute(self, ex: Execution) -> None:
        run = ex.run
        if ex.cancel_reason is not None:
            # Lost before it began (taken over again at once); never start a zombie.
            self._drop(ex)
            return
        if run.cancel_requested:
            self._submit(ex, Outcome(run, "cancelled"))
            return
        if run.lease_lapses >= self._max_lapses:
            self._submit(ex, self._quarantined(run))
            return
        try:
            fn = self._registry.resolve(run.handler)
        except UnknownHandler as err:
            self._submit(ex, self._failure(run, err))
            return
        downstreams = self._registry.downstreams(run.handler) if self._gate is not None else ()
        passed = await self._admit(ex, downstreams)
        if passed is None:
            return
        ex.in_handler = True
        started = time.monotonic()
        lines = capture.AttemptLog()
        ex.pulse = pulse = self._pulse(ex)
        try:
            with capture.attempt_log() as lines, _handler_span(run):
                result = await self._invoke(
                    fn, self._context(run, pulse, ex.cancellation), run.retry.start_to_close, pulse
                )
        except asyncio.CancelledError as error:
            if ex.reason() is not None:
                self._observe(run.handler, "cancelled", started)
                self._cancelled(ex)
                return
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # not ours: the process is going down
            # The handler raised CancelledError itself (nobody cancelled this task): a failure.
            self._observe(run.handler, "failed", started)
            self._submit(ex, _with_logs(await self._settle(run, downstreams, passed, error), lines))
            return
        except BaseException as error:  # noqa: BLE001 - handler code never escapes its run, SystemExit included
            if ex.cancelled_on_request():
                # Its cleanup after the CancelledError raised something else: still a cancellation.
                self._observe(run.handler, "cancelled", started)
                self._cancelled(ex)
                return
            self._observe(run.handler, "failed", started)
            if not isinstance(error, Exception):
                log.error("run %s: handler raised %r; recorded as a failure", run.run_id, error)
            if isinstance(error, FenceRejected):
                log.warning("run %s token %d: handler write refused: %s", run.run_id, run.fence_token, error)
            self._submit(ex, _with_logs(await self._settle(run, downstreams, passed, error), lines))
            return
        finally:
            ex.in_handler = False
            pulse.close()  # a heartbeat after the handler returned starts no write
        if ex.cancelled_on_request():
            # The handler caught its CancelledError and returned: the run was cancelled all the same
            # (a thread handler whose wait was given up on lands here only if it was quick).
            self._observe(run.handler, "cancelled", started)
            self._cancelled(ex)
            return
        self._observe(run.handler, "completed", started)
        await self._settle(run, downstreams, passed, None)
        self._submit(ex, Outcome(run, "completed", result=result, logs=lines.result()))

    async def _admit(self, ex: Execution, downstreams: Sequence[str]) -> Pass | None:
        """Ask the run's downstreams; None when the run was held instead (its outcome submitted)."""
        if not downstreams or self._gate is None:
            return Pass()
        try:
            verdict = await self._gate.admit(ex.run, downstreams)
        except STORAGE_RETRYABLE as err:
            # Fail open: without the database the outcome cannot be recorded either, and a
            # breaker that cannot be read must not stop work that may well succeed.
            log.warning("run %s: downstream admission unavailable (%r); running it", ex.run.run_id, err)
            return Pass()
        if isinstance(verdict, Pass):
            return verdict
        self._submit(ex, verdict)
        return None

    async def _settle(
        self, run: Run, downstreams: Sequence[str], passed: Pass, error: BaseException | None
    ) -> Outcome:
        """The attempt's outcome once its downstreams have seen the result (a hold if one opened)."""
        if downstreams and self._gate is not None:
            try:
                held = await self._gate.settle(run, downstreams, passed, error)
            except STORAGE_RETRYABLE as err:
                log.warning("run %s: downstream result not recorded: %r", run.run_id, err)
                held = None
            if held is not None:
                return held
        return self._failure(run, error) if error is not None else Outcome(run, "completed")

    def _observe(self, handler: str, outcome: str, started: float) -> None:
        # The labelled child is looked up once per (handler, outcome), not once per run.
        child = self._durations.get((handler, outcome))
        if child is None:
            child = self._durations[(handler, outcome)] = self._metrics.handler_seconds.labels(
                handler, outcome
            )
        child.observe(time.monotonic() - started)

    async def _invoke(self, handler: Handler, ctx: RunContext, limit: timedelta, pulse: Pulse) -> Any:
        # start_to_close: an attempt that hangs is cancelled and counts as a transient failure. A
        # thread or a process cannot be cancelled: the wait for it is, and the worker stays busy
        # until the function returns (its late writes meet the fence like any zombie's).
        async with asyncio.timeout(limit.total_seconds()):
            silent_after = pulse.timeout
            if silent_after is None:
                return await self._call(handler, ctx)
            # heartbeat_timeout: the same cancellation, on a deadline every heartbeat moves on.
            silence = asyncio.timeout(silent_after.total_seconds())
            try:
                async with silence:
                    pulse.watch(silence)
                    try:
                        return await self._call(handler, ctx)
                    finally:
                        # A thread handler the wait gave up on may still heartbeat: the deadline
                        # is over, and a Timeout cannot be moved once its block is left.
                        pulse.watch(None)
            except TimeoutError:
                if silence.expired():
                    raise pulse.timed_out() from None
                raise

    async def _call(self, handler: Handler, ctx: RunContext) -> Any:
        if handler.runs_in == "loop":
            return await handler.fn(ctx)
        loop = asyncio.get_running_loop()
        if handler.runs_in == "thread":
            result = await loop.run_in_executor(
                self._threads, contextvars.copy_context().run, handler.fn, ctx
            )
            if inspect.isawaitable(result):
                # A plain callable that hands back a coroutine (a lambda over an async
                # handler): the awaiting belongs on the loop.
                result = await result
            return result
        processes = self._processes()
        try:
            return await loop.run_in_executor(processes, handler.fn, ctx.detached())
        except concurrent.futures.process.BrokenProcessPool:
            # A worker died (the handler ended its process, or the OOM killer did): the pool
            # refuses all work from now on, so the next attempt gets a fresh one.
            if self._process_pool is processes:
                self._process_pool = None
                processes.shutdown(wait=False, cancel_futures=True)
            raise

    def _processes(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._process_pool is None:
            # spawn, not fork: forking a process that runs an event loop and driver threads copies
            # their locks in whatever state they are.
            self._process_pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self._process_workers, mp_context=multiprocessing.get_context("spawn")
            )
        return self._process_pool

    def close(self) -> None:
        """Stop the handler pools (at exit: a worker still busy is not waited for)."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._process_pool is not None:
            self._process_pool.shutdown(wait=False, cancel_futures=True)

    def _pulse(self, ex: Execution) -> Pulse:
        run = ex.run
        timeout = run.retry.heartbeat_timeout

        async def write(details: str | None) -> bool:
            async with self._pool.acquire() as conn:
                recorded = await store.record_heartbeat(
                    conn,
                    self._schema,
                    run_id=run.run_id,
                    token=run.fence_token,
                    details=details,
                    timeout=timeout.total_seconds() if timeout is not None else None,
                )
            if recorded is None:
                return False
            if recorded.cancel_requested:
                # Its workflow cancelled it: learnt at this heartbeat, before the next lease renewal.
                self.request_cancel(ex)
            return True

        def refused() -> None:
            # The run was taken over, or its attempt failed for silence elsewhere: a zombie.
            self._metrics.fence_rejected.labels("heartbeat").inc()
            log.warning(
                "run %s token %d: heartbeat refused (the run is no longer this attempt's)",
                run.run_id,
                run.fence_token,
            )
            self._lose(ex, excused=self._lost_by_claimer(ex))

        return Pulse(run_id=run.run_id, timeout=timeout, write=write, refused=refused)

    def _context(self, run: Run, pulse: Pulse, cancellation: threading.Event) -> RunContext:
        def rejected(err: FenceRejected) -> None:
            self._metrics.fence_rejected.labels("handler").inc()
            log.warning("FenceRejected in handler of run %s (token %d): %s", run.run_id, run.fence_token, err)

        return RunContext(
            run_id=run.run_id,
            job_id=run.job_id,
            slot=run.slot,
            attempt=run.attempt,
            fence_token=run.fence_token,
            payload=run.payload,
            kind=run.kind,
            owner=self._owner,
            fenced=FencedWrites(token=run.fence_token, pool=self._handler_pool, on_rejected=rejected),
            pool=self._handler_pool,
            workflow_id=run.workflow_id,
            sequence=run.sequence,
            tags=run.tags,
            handler=run.handler,
            loop=asyncio.get_running_loop(),
            heartbeat_details=run.heartbeat_details,
            on_heartbeat=pulse.beat,
            cancellation=cancellation,
        )

    def _quarantined(self, run: Run) -> Outcome:
        log.error(
            "run %s: lease lapsed %d times (its claimers died or froze running it); quarantined",
            run.run_id,
            run.lease_lapses,
        )
        error = RunQuarantined(
            f"run {run.run_id} lost its claimer {run.lease_lapses} times while running "
            f"(bound {self._max_lapses}); quarantined instead of being started again"
        )
        return Outcome(run, "failed", error=error, dlq_reason="quarantined", retryable=False)

    def _failure(self, run: Run, error: BaseException) -> Outcome:
        return sort_failure(run, error, draw=self._rng.random())

    def _submit(self, ex: Execution, outcome: Outcome) -> None:
        ex.submitted = True
        if ex.pulse is not None:
            ex.pulse.close()
            unsaved = ex.pulse.unsaved()
            if unsaved is not None:
                outcome = dataclasses.replace(outcome, heartbeat_details=unsaved)
        if outcome.kind == "failed":
            log_failure(outcome)
        self._submit_outcome(outcome)

    def _cancelled(self, ex: Execution) -> None:
        reason = ex.cancel_reason
        if reason == "cancel_requested":
            self._submit(ex, Outcome(ex.run, "cancelled"))
        elif reason == "shutdown":
            self._released.append(ex)
        else:
            # Lost: the run is someone else's now; nothing of ours may be recorded for it.
            self._drop(ex)

    def _drop(self, ex: Execution) -> None:
        if self._executions.get(ex.run.run_id) is ex:
            del self._executions[ex.run.run_id]
            self._changed()

    def watch_freezes(self, froze_since: Callable[[float], bool]) -> None:
        """Excuse the lapses of runs lost while this process froze (LoopWatchdog.froze_since)."""
        self._froze_since = froze_since

    def _lost_by_claimer(self, ex: Execution) -> bool:
        """``ex``'s lease was lost through this claimer, not its run, since it was last renewed: a
        heartbeat failed to reach the database, or the process froze (stopped or starved of CPU,
        no handler blocking its loop). A run whose handler kills or blocks its claimer is not
        excused: it is quarantined after MAX_LEASE_LAPSES."""
        if self._storage_failed_at is not None and self._storage_failed_at > ex.renewed_at:
            return True
        return self._froze_since is not None and self._froze_since(ex.renewed_at)

    def _lose(self, ex: Execution, *, excused: bool = False) -> None:
        if ex.submitted or ex.cancel_reason is not None:
            return
        if excused:
            self._excuses.add((ex.run.run_id, ex.run.fence_token))
        self._metrics.leases_lost.inc()
        log.warning(
            "run %s: lease with token %d lost; cancelling its handler", ex.run.run_id, ex.run.fence_token
        )
        ex.cancel_reason = "lost"
        if ex.in_handler and ex.task is not None:
            ex.task.cancel()
        else:
            self._drop(ex)

    def time_out(self, silent: Sequence[store.Silent]) -> None:
        """Record the failure of attempts whose claimer went silent past their heartbeat deadline.

        The reaper took each run with the next token (TIME_OUT_SILENT): nothing runs here, the
        attempt's outcome is submitted at once, and it is retried (or dead-lettered) by its policy
        like any failed attempt. A cancellation requested meanwhile is recorded as one instead.
        """
        for found in silent:
            run = found.run
            previous = self._executions.get(run.run_id)
            if previous is not None and previous.run.fence_token < run.fence_token:
                # Our own attempt, silent past the grace (its loop or thread starved): a zombie now.
                self._lose(previous)
            ex = Execution(run, renewed_at=time.monotonic())
            self._executions[run.run_id] = ex
            if run.cancel_requested:
                self._submit(ex, Outcome(run, "cancelled"))
                continue
            timeout = run.retry.heartbeat_timeout or timedelta(0)
            error = HeartbeatTimeout(silence_message(timeout, owner=found.owner))
            self._submit(ex, self._failure(run, error))
        self._changed()

    def settled(self, outcomes: Sequence[Outcome], started: Sequence[Run]) -> None:
        """The writer recorded (or the fence refused) ``outcomes``; ``started`` are buffered starts."""
        executions = self._executions
        for outcome in outcomes:
            ex = executions.get(outcome.run.run_id)
            if ex is not None and ex.run.fence_token == outcome.run.fence_token:
                del executions[ex.run.run_id]
        # Once per batch rather than once per run: the gauge and the space event.
        self.start_all(started)

    # -- heartbeat ----------------------------------------------------------------------------

    async def heartbeat_once(self) -> None:
        """Renew every held lease in one statement; act on lost leases and cancellation requests."""
        if self._orphans:
            await self._release_orphans()
        await self.excuse_lapses()
        held = {rid: ex.run.fence_token for rid, ex in self._executions.items() if not ex.submitted}
        if not held:
            return
        sent_at = time.monotonic()
        try:
            async with self._pool.acquire() as conn:
                renewed = await store.heartbeat(conn, self._schema, held, owner=self._owner, ttl=self._ttl)
        except STORAGE_RETRYABLE as err:
            log.warning("claimer: heartbeat failed: %r", err)
            self._storage_failed_at = sent_at
            for stale in list(self._executions.values()):
                if sent_at - stale.renewed_at > self._ttl:
                    self._lose(stale, excused=True)
            return
        for rid, token in held.items():
            found = self._executions.get(rid)
            if found is None or found.run.fence_token != token:
                continue
            if rid not in renewed:
                # Taken over. If this claimer's heartbeats could not reach the database, or the
                # process froze, the lapse was the claimer's, not the run's.
                self._lose(found, excused=self._lost_by_claimer(found))
                continue
            found.renewed_at = sent_at
            if renewed[rid]:
                self.request_cancel(found)

    def request_cancel(self, ex: Execution) -> None:
        """The run's cancellation was asked for (a newer run replaced it, or its workflow cancelled
        it): the handler gets CancelledError at its current await (a thread handler at its next
        `ctx.heartbeat`; its wait is given up on at once), and the attempt is recorded `cancelled`."""
        if ex.submitted or ex.cancel_reason is not None or not ex.in_handler or ex.task is None:
            return  # not started yet: the next renewal asks again; or its outcome is decided already
        ex.cancel_reason = "cancel_requested"
        ex.cancellation.set()
        ex.task.cancel()

    async def excuse_lapses(self) -> None:
        """Excuse the lapses of the runs this claimer lost while the database was unreachable or
        the process froze.

        The heartbeat calls it, and the reaper before every pass: its own takeover of such a run
        must see the lapse excused, or it would quarantine the run it is about to start again."""
        if not self._excuses:
            return
        excuses, self._excuses = self._excuses, set()
        # One statement per token of a run, oldest first: an UPDATE changes a row once however
        # many of its input rows match it.
        rounds: list[dict[str, int]] = []
        for run_id, token in sorted(excuses, key=lambda pair: pair[1]):
            free = next((r for r in rounds if run_id not in r), None)
            if free is None:
                free = {}
                rounds.append(free)
            free[run_id] = token
        excused = 0
        try:
            async with self._pool.acquire() as conn:
                for tokens in rounds:
                    excused += await store.excuse_lapses(conn, self._schema, tokens, owner=self._owner)
        except STORAGE_RETRYABLE as err:
            log.warning(
                "claimer: excusing the lapses of runs lost to the database or a freeze failed: %r", err
            )
            self._excuses.update(excuses)  # the next pass tries again; a repeated excuse is a no-op
            return
        log.info(
            "claimer: %d run(s) lost while the database was unreachable or this process froze; %d lapse(s) excused",
            len(excuses),
            excused,
        )

    async def _release_orphans(self) -> None:
        orphans, self._orphans = self._orphans, {}
        try:
            async with self._pool.acquire() as conn:
                await store.release(conn, self._schema, orphans, graceful=False)
        except STORAGE_RETRYABLE as err:
            log.warning("claimer: releasing runs without an outcome failed: %r", err)
            self._orphans.update(orphans)  # the lease lapses meanwhile; the next pass tries again
            return
        self._metrics.released.inc(len(orphans))

    async def heartbeat_loop(self, stop: asyncio.Event, interval: float) -> None:
        while not await sleep_or_stop(stop, interval):
            await self.heartbeat_once()

    # -- shutdown -----------------------------------------------------------------------------

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every held run to be recorded; True if all were."""
        deadline = time.monotonic() + timeout
        while self._executions and time.monotonic() < deadline:
            self._space.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._space.wait(), timeout=min(0.1, max(deadline - time.monotonic(), 0))
                )
        return not self._executions

    async def release_all(self) -> int:
        """Cancel running handlers and expire their leases so another claimer takes them at once."""
        for ex in list(self._executions.values()):
            if ex.in_handler and ex.task is not None and ex.cancel_reason is None:
                ex.cancel_reason = "shutdown"
                ex.task.cancel()
        tasks = [ex.task for ex in self._executions.values() if ex.task is not None and not ex.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        released = self._released
        self._released = []
        tokens = {ex.run.run_id: ex.run.fence_token for ex in released}
        count = 0
        if tokens:
            async with self._pool.acquire() as conn:
                count = await store.release(conn, self._schema, tokens)
            self._metrics.released.inc(count)
        for ex in released:
            self._drop(ex)
        return count

    def abandon(self) -> None:
        """Cancel whatever still runs (last resort at exit; the leases expire on their own)."""
        for ex in self._executions.values():
            if ex.pulse is not None:
                ex.pulse.close()
            if ex.task is not None and not ex.task.done():
                ex.task.cancel()


@contextlib.contextmanager
def _handler_span(run: Run) -> Iterator[None]:
    """The handler's span (tracing on): child of the claim, current while the handler runs, so
    spans the handler opens itself nest below it; what it raises is recorded on it."""
    if not tracing.enabled():
        yield
        return
    with tracing.span(
        TRACE_SCOPE, f"handler {run.handler}", parent=run.trace_parent(), attributes=run.span_attributes()
    ) as span:
        # RunCompleted (or RunFailed) is staged below the handler's span.
        run.trace = tracing.context_of(span)
        yield


def sort_failure(run: Run, error: BaseException, *, draw: float) -> Outcome:
    """Retry (with a full-jitter delay from ``draw``) or dead-letter, and why (pure)."""
    retryable = is_retryable(error, non_retryable=run.retry.non_retryable)
    delay = next_retry_delay(run.retry, attempt=run.attempt_in_round, error=error, draw=draw)
    if run.attempt >= ATTEMPT_CEILING:
        # The attempt counter is a PostgreSQL integer: an unlimited budget (or redrives' fresh
        # ones) ends here, dead-lettered, rather than overflowing the next claim's attempt + 1.
        delay = None
    if delay is not None:
        return Outcome(run, "failed", error=error, delay=delay, retryable=True)
    if isinstance(error, UnknownHandler):
        reason = UnknownHandler.reason
    elif retryable:
        reason = "attempts_exhausted"
    else:
        reason = "permanent_error"
    return Outcome(run, "failed", error=error, dlq_reason=reason, retryable=retryable)


def log_failure(outcome: Outcome) -> None:
    """One line per failed attempt, saying whether it is retried or dead-lettered and why.

    The run id, attempt and error go in as `extra` fields too, so JSON logs (SLOTFLOW_LOG_FORMAT)
    carry them as keys a log search can filter on.
    """
    run, error = outcome.run, outcome.error
    error_type = type(error).__name__ if error is not None else "unknown"
    fields: dict[str, object] = {
        "run_id": run.run_id,
        "attempt": run.attempt,
        "fence_token": run.fence_token,
        "handler": run.handler,
        "error_type": error_type,
        "error": str(error),
    }
    if outcome.delay is not None:
        seconds = round(outcome.delay.total_seconds(), 3)
        log.warning(
            "run %s attempt %d failed (%s: %s); retrying in %s s",
            run.run_id,
            run.attempt,
            error_type,
            error,
            seconds,
            extra={**fields, "outcome": "retrying", "retry_in_seconds": seconds},
        )
    else:
        log.error(
            "run %s attempt %d failed (%s: %s); dead-lettered: %s",
            run.run_id,
            run.attempt,
            error_type,
            error,
            outcome.dlq_reason,
            extra={**fields, "outcome": "dead_lettered", "dlq_reason": outcome.dlq_reason},
        )


def _with_logs(outcome: Outcome, lines: capture.AttemptLog) -> Outcome:
    """``outcome`` carrying what the handler logged during the attempt."""
    return dataclasses.replace(outcome, logs=lines.result())
