"""What every slotflow service process shares: named loops under one supervisor, `sleep_or_stop`,
migrations at start, the metrics listener and a group of outbox relays.

A service's composition root builds its parts, adds each long-running loop to a `Supervisor` and
runs it until a stop event. See docs/development.md ("The service runtime").
"""

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from slotflow.core.stopping import sleep_or_stop
from slotflow.errors import SlotflowError, TransientStorageError
from slotflow.pg.migrations import INBOX, OUTBOX, PAYLOADS, MigrationSource, apply_migrations
from slotflow.pg.pool import CONNECTION_ERRORS, Pool
from slotflow.relay import OutboxRelay

log = logging.getLogger(__name__)

#: A loop runs until its stop event is set, then finishes what it holds and returns.
Loop = Callable[[asyncio.Event], Awaitable[None]]


class SupervisorError(SlotflowError):
    """The supervisor was used out of order (a loop added twice, or after it started)."""


class Service(Protocol):
    """Every service's one lifecycle: run until ``stop`` is set, then finish what it holds and
    return; a crashed loop ends it early by raising that loop's error."""

    async def run(self, stop: asyncio.Event) -> None: ...


#: Exit status of a service that stopped because it was asked to (SIGTERM, SIGINT).
EXIT_STOPPED = 0
#: Exit status of a service that stopped on its own: a loop crashed, or it could not start.
EXIT_CRASHED = 1


def serve(
    name: str, build: Callable[[], Service], *, event_loop: Literal["uvloop", "asyncio"] = "asyncio"
) -> int:
    """Every service's entry: build the service, run it until SIGTERM or SIGINT, return the exit
    status (`EXIT_STOPPED` after a stop, `EXIT_CRASHED` when it ended any other way).

    ``build`` is called inside the running event loop, so what it makes binds to that loop.
    """
    if event_loop == "uvloop":
        import uvloop

        return uvloop.run(_until_stopped(name, build))
    return asyncio.run(_until_stopped(name, build))


async def _until_stopped(name: str, build: Callable[[], Service]) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await build().run(stop)
    except Exception:
        # The supervisor logged which loop crashed; this says what the process does about it.
        log.exception("%s: stopped by an error; exiting with status %d", name, EXIT_CRASHED)
        return EXIT_CRASHED
    if not stop.is_set():
        # Every loop returned on its own: nothing keeps the service's promises any more.
        log.error("%s: every loop ended without a stop; exiting with status %d", name, EXIT_CRASHED)
        return EXIT_CRASHED
    return EXIT_STOPPED


async def migrate(
    pool: Pool,
    *,
    schema: str,
    source: MigrationSource,
    outbox: bool = True,
    inbox: bool = True,
    payloads: bool = False,
) -> list[str]:
    """Create or upgrade a service's schema: the library's outbox and inbox (and the payload table
    of a service that offloads large payloads), then its own files."""
    sources = [
        *([OUTBOX] if outbox else []),
        *([INBOX] if inbox else []),
        *([PAYLOADS] if payloads else []),
        source,
    ]
    return await apply_migrations(pool, schema=schema, sources=sources)


@contextlib.contextmanager
def metrics_listener(registry: CollectorRegistry, *, port: int | None, host: str) -> Iterator[None]:
    """Serve `registry` on http://host:port/metrics while the block runs (nothing when no port).

    The api's own (its probes are routes of its app); the worker services serve their metrics with
    their probes, `slotflow.health.health_listener`."""
    if not port:
        yield
        return
    server, thread = start_http_server(port, addr=host, registry=registry)
    log.info("metrics on http://%s:%d/metrics", host, port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def periodic(
    seconds: float, job: Callable[[], Awaitable[None]], *, outages: tuple[type[BaseException], ...], what: str
) -> Loop:
    """A loop that runs `job` every `seconds`; an outage (one of `outages`) is logged and outlived."""

    async def loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await job()
            except outages as err:
                log.warning("%s failed: %s", what, err)
            await sleep_or_stop(stop, seconds)

    return loop


#: How often a service counts its outbox backlog: one count over the pending rows' partial index.
OUTBOX_BACKLOG_SECONDS = 5.0
#: What a count of the backlog outlives: the database away for a while.
_STORAGE_OUTAGES: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)


def outbox_backlog(
    relay: "OutboxRelay | RelayGroup", gauge: Gauge, *, seconds: float = OUTBOX_BACKLOG_SECONDS
) -> Loop:
    """A loop that sets ``gauge`` to the events staged in the outbox and not yet published, every
    ``seconds``: a backlog that grows is a relay that cannot publish (the broker refuses, or the
    relay is gone), and every event behind it waits."""

    async def count() -> None:
        gauge.set(await relay.pending())

    return periodic(seconds, count, outages=_STORAGE_OUTAGES, what="outbox backlog")


class RelayGroup:
    """One process's outbox relays, each on its own shards, seen as one."""

    def __init__(self, relays: Sequence[OutboxRelay]) -> None:
        self.relays = list(relays)

    def wake(self) -> None:
        for relay in self.relays:
            relay.wake()

    @property
    def published(self) -> int:
        return sum(relay.published for relay in self.relays)

    async def pending(self) -> int:
        return await self.relays[0].pending()  # the whole outbox, whichever relay asks

    def add_to(self, supervisor: "Supervisor", *, name: str = "relay", stage: int = 0) -> None:
        """Each relay as its own loop, `relay-0`, `relay-1`, ..."""
        for index, relay in enumerate(self.relays):
            supervisor.add(f"{name}-{index}", relay.run, stage=stage)


@dataclass
class _Entry:
    name: str
    loop: Loop
    stage: int
    cancel_on_stop: bool
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None


class Supervisor:
    """Named loops run as one unit under an `asyncio.TaskGroup`.

    - A loop that raises is fatal: the others are cancelled and `run` raises that loop's error
      (`crashed` names the loop).
    - A stop drains: each loop's own stop event is set and the loop awaited, stage by stage in
      ascending order, so a later stage (a relay, say) still runs while an earlier one (the intake
      feeding it) finishes. Loops marked `cancel_on_stop` are cancelled instead of awaited (work
      they hold is leased and retried elsewhere). A `drain` coroutine given to `run` replaces this
      order; it calls `stop_loops` itself.
    - A loop that returns before the stop is simply done.
    """

    def __init__(self, service: str) -> None:
        self.service = service
        self._entries: dict[str, _Entry] = {}
        self._started = False
        self.crashed: str | None = None
        self.failed = asyncio.Event()
        self.running = asyncio.Event()

    def add(self, name: str, loop: Loop, *, stage: int = 0, cancel_on_stop: bool = False) -> None:
        """Run `loop(stop)` under `name`; its stop is set in `stage` of a drain."""
        if self._started:
            raise SupervisorError(f"{self.service}: loop {name} added after the start")
        if name in self._entries:
            raise SupervisorError(f"{self.service}: two loops named {name}")
        self._entries[name] = _Entry(name, loop, stage, cancel_on_stop)

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def problem(self) -> str | None:
        """Why the loops are not all at work (a readiness gate, `slotflow.health`), or None."""
        if self.crashed is not None:
            return f"the {self.crashed} loop crashed"
        if not self.running.is_set():
            return "not running" if self._started else "not started yet"
        return None

    async def run(self, stop: asyncio.Event, *, drain: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run every loop until `stop` is set (then drain) or a loop raises (then re-raise it)."""
        if self._started:
            raise SupervisorError(f"{self.service}: already started")
        self._started = True
        error: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                for entry in self._entries.values():
                    entry.task = group.create_task(self._guard(entry), name=f"{self.service}-{entry.name}")
                group.create_task(self._watch(stop, drain), name=f"{self.service}-supervisor")
                self.running.set()
        except BaseExceptionGroup as grouped:
            error = grouped.exceptions[0]
        finally:
            self.running.clear()
        if error is not None:
            # The loop's own error, raised outside the group: callers catch it by its type.
            raise error

    async def stop_loops(self, *names: str) -> None:
        """Drain the named loops (all, when none is named): set their stops and await them."""
        entries = [self._entries[n] for n in names] if names else list(self._entries.values())
        for entry in entries:
            entry.stop.set()
            if entry.cancel_on_stop and entry.task is not None:
                entry.task.cancel()
        tasks = [e.task for e in entries if e.task is not None]
        if tasks:
            # A loop's own error reaches the TaskGroup; here only its end matters.
            await asyncio.wait(tasks)

    async def drain(self) -> None:
        """The default drain: stage by stage, lowest first."""
        for stage in sorted({e.stage for e in self._entries.values()}):
            await self.stop_loops(*(e.name for e in self._entries.values() if e.stage == stage))

    async def _guard(self, entry: _Entry) -> None:
        try:
            await entry.loop(entry.stop)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.crashed is None:
                self.crashed = entry.name
            self.failed.set()
            log.exception("%s: the %s loop crashed; stopping the service", self.service, entry.name)
            raise

    async def _watch(self, stop: asyncio.Event, drain: Callable[[], Awaitable[None]] | None) -> None:
        remaining: set[asyncio.Future[Any]] = {e.task for e in self._entries.values() if e.task is not None}
        stopper = asyncio.ensure_future(stop.wait())
        try:
            # Until the stop, or until every loop has returned on its own; a crash cancels this.
            while remaining and not stop.is_set():
                done, _ = await asyncio.wait({stopper, *remaining}, return_when=asyncio.FIRST_COMPLETED)
                remaining -= done
        finally:
            stopper.cancel()
        try:
            await (drain or self.drain)()
        except Exception:
            log.exception("%s: the drain failed", self.service)
            raise


__all__ = [
    "EXIT_CRASHED",
    "EXIT_STOPPED",
    "Loop",
    "RelayGroup",
    "Service",
    "Supervisor",
    "SupervisorError",
    "metrics_listener",
    "migrate",
    "outbox_backlog",
    "periodic",
    "serve",
    "sleep_or_stop",
]
