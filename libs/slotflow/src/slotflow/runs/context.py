"""What a handler receives: the run's identity, its fencing token, and fenced writes bound to it.

`run_id` is the idempotency key: the same for every attempt and every claimer of one slot.
`fence_token` grows by one on every claim; a write stamped with it is refused by storage that has
already seen a higher one. `fenced` does that stamping for the user's own tables. `heartbeat`
records progress for the next attempt (`heartbeat_details`) and keeps a `heartbeat_timeout` at bay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from slotflow.errors import ConfigurationError, FenceRejected
from slotflow.pg.fencing import FENCES_TABLE, Row, advance_fence, fenced_upsert
from slotflow.pg.pool import Conn, Pool
from slotflow.runs.heartbeats import details_json

RejectionHook = Callable[[FenceRejected], None]
#: Where `RunContext.heartbeat` sends a heartbeat, on the claimer's loop: the details as JSON text,
#: or None for a heartbeat without details (the recorded ones stay).
HeartbeatHook = Callable[[str | None], None]
T = TypeVar("T")


class FencedWrites:
    """`fenced_upsert` and `advance_fence` with the run's token filled in.

    Without ``conn`` a write takes a connection from the handler pool and commits on its own; pass
    ``conn`` to write inside your own transaction.
    """

    def __init__(self, *, token: int, pool: Pool | None, on_rejected: RejectionHook | None = None) -> None:
        self.token = token
        self._pool = pool
        self._on_rejected = on_rejected

    async def upsert(
        self,
        *,
        table: str,
        key: Mapping[str, Any],
        values: Mapping[str, Any],
        conn: Conn | None = None,
        token_column: str = "fence_token",  # noqa: S107 - a column name, not a secret
    ) -> Row:
        """Write the row at ``key`` stamped with this run's token (see `fenced_upsert`).

        Raises:
            FenceRejected: the row already carries a higher token: another claimer owns the run.
        """
        try:
            if conn is not None:
                return await fenced_upsert(
                    conn, table=table, key=key, values=values, token=self.token, token_column=token_column
                )
            async with self._require_pool().acquire() as own:
                return await fenced_upsert(
                    own, table=table, key=key, values=values, token=self.token, token_column=token_column
                )
        except FenceRejected as rejected:
            self._rejected(rejected)
            raise

    async def advance(self, resource: str, *, conn: Conn, table: str = FENCES_TABLE) -> None:
        """Advance ``resource``'s fence to this run's token inside ``conn``'s transaction.

        Raises:
            FenceRejected: the resource has seen a higher token; roll the transaction back.
        """
        try:
            await advance_fence(conn, resource, self.token, table=table)
        except FenceRejected as rejected:
            self._rejected(rejected)
            raise

    def _require_pool(self) -> Pool:
        if self._pool is None:
            raise ConfigurationError("no handler database is configured; pass conn=")
        return self._pool

    def _rejected(self, rejected: FenceRejected) -> None:
        if self._on_rejected is not None:
            self._on_rejected(rejected)


@dataclass(frozen=True, slots=True)
class RunContext:
    """Everything a handler knows about the run it executes."""

    #: `{job_id}@{slot}` (or `{workflow_id}/{sequence}`): the idempotency key for every attempt.
    run_id: str
    job_id: str
    slot: datetime
    #: 1 for the first try; retries count up.
    attempt: int
    #: Raised by one on every claim of this run; stamp writes with it (see `fenced`).
    fence_token: int
    payload: Mapping[str, Any]
    #: scheduled, manual, backfill, retry or activity.
    kind: str
    #: The claimer executing this attempt.
    owner: str
    #: Writes for the user's own tables, stamped with `fence_token`.
    fenced: FencedWrites
    #: The handler database (SLOTFLOW_CLAIMER_HANDLER_DSN), or None when none is configured.
    pool: Pool | None = None
    workflow_id: str | None = None
    sequence: int | None = None
    tags: tuple[str, ...] = ()
    handler: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: The claimer's event loop, which owns `pool` and `fenced` (None in a process-pool handler).
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)
    #: The details the run's last heartbeat recorded (an earlier attempt's, or an earlier claim's of
    #: this attempt), decoded from their JSON; None when none were recorded (a first attempt). Temporal's
    #: `activity.info().heartbeat_details`.
    heartbeat_details: Any = None
    #: Where heartbeats go (the claimer's executor); None: nowhere (a context built by hand).
    on_heartbeat: HeartbeatHook | None = field(default=None, repr=False, compare=False)
    #: Set once the run's cancellation was asked for (`is_cancelled`); None: never (built by hand).
    cancellation: threading.Event | None = field(default=None, repr=False, compare=False)

    def is_cancelled(self) -> bool:
        """Whether the run's cancellation was asked for (Temporal's `activity.is_cancelled()`): its
        workflow no longer waits on it, or a newer run of its job replaced it. An `async def`
        handler gets `asyncio.CancelledError` at its current await anyway; a plain `def` handler
        (a thread, which cannot be interrupted) checks this, or calls `heartbeat`, which raises."""
        return self.cancellation is not None and self.cancellation.is_set()

    def heartbeat(self, details: Any = None) -> None:
        """Report that the attempt is alive, and where it got to (Temporal's `activity.heartbeat`).

        ``details`` (JSON: a dict, list, scalar, or a pydantic model or dataclass of them) replace
        the recorded ones, and the next attempt reads them as `heartbeat_details`; None keeps the
        recorded ones and only proves liveness. Returns at once: the claimer writes the newest
        details on the run, fenced by `fence_token`, at most once per throttle interval (0.8 x the
        policy's `heartbeat_timeout`, else 30 s), and the last ones with the attempt's outcome.
        Callable from the loop and from a thread handler; not from a process-pool handler.

        Raises:
            asyncio.CancelledError: called from a thread handler whose run was cancelled
                (`is_cancelled`): clean up and let it propagate.
            HeartbeatDetailsError: ``details`` are not JSON, cannot be stored, or are larger than
                HEARTBEAT_DETAILS_MAX_BYTES.
            ConfigurationError: called in a process-pool handler, which has no way to the claimer.
        """
        text = None if details is None else details_json(details)
        if self.is_cancelled() and not _on_a_loop():
            # A thread handler learns of its cancellation here (Temporal raises it at the heartbeat
            # of a sync activity); an `async def` one gets it at its current await already.
            raise asyncio.CancelledError(f"run {self.run_id} was cancelled")
        hook = self.on_heartbeat
        if hook is None:
            return
        loop = self.loop
        if loop is None:
            hook(text)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            hook(text)
        else:
            loop.call_soon_threadsafe(hook, text)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """From a plain `def` handler (a worker thread): run ``coro`` on the claimer's loop, wait.

        The pool and the fenced writes belong to that loop, so a thread handler reaches them this
        way: ``ctx.call(ctx.fenced.upsert(table=..., key=..., values=...))``.

        Raises:
            ConfigurationError: called on the loop itself, or where there is no loop (a process).
        """
        loop = self.loop
        if loop is None:
            coro.close()
            raise ConfigurationError("no claimer loop here: a process-pool handler has no pools")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise ConfigurationError("ctx.call from the loop would deadlock; await the coroutine")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def detached(self) -> RunContext:
        """This context without the loop-bound parts, picklable for a process-pool handler."""
        return dataclasses.replace(
            self,
            fenced=FencedWrites(token=self.fence_token, pool=None),
            pool=None,
            loop=None,
            extra={},
            on_heartbeat=None if self.on_heartbeat is None else _no_claimer_here,
            cancellation=None,
        )


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _no_claimer_here(_details: str | None) -> None:
    """A process-pool handler's heartbeat: its process has no way to the claimer's loop."""
    raise ConfigurationError("a process-pool handler cannot heartbeat: run it in a thread (runs_in='thread')")
