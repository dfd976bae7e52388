"""What a worker service's probes ask, answered honestly: one listener per process on its metrics
port serves `/metrics`, `/livez` and `/readyz` (docs/operations.md, "Probes").

- Liveness (`GET /livez`): a task on the service's event loop stamps the time every
  `BEAT_SECONDS`; the listener answers 200 while the last stamp is younger than the stall
  threshold and 503 (``event loop stalled for 42.0 s``) once it is older. The listener runs on a
  thread of its own, so it answers while the loop is stuck: a loop blocked by a synchronous call
  (or wedged for good) is seen and the process restarted, where a scrape of `/metrics` (served
  from a thread too) kept answering 200 in milliseconds.
- Readiness (`GET /readyz`): 200 only while the service is at work and can reach what it needs:
  every gate passes (its loops run, its consumer groups were joined) and every probe (a
  `SELECT 1` through its pool, a metadata request through its producer) succeeded within
  `stale_after` seconds; 503 naming each problem otherwise (``postgres: unreachable for 12 s:
  ...``). A service that is stopping answers 503 from the moment its stop is set, so a rollout and
  a PodDisruptionBudget see it leave while it drains.

Gates and probes run on the event loop, never on the listener's thread: the thread only reads
what they last found (and the stop event's flag), so nothing of the service's state is touched
from another thread.
"""

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

from slotflow.kafka.producer import Producer
from slotflow.logs import redact
from slotflow.pg.pool import Pool

log = logging.getLogger(__name__)

LIVENESS_PATH = "/livez"
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"
#: Every path the listener answers; any other is 404 (prometheus_client alone answered every path
#: with the metrics, so a probe asking a misspelt path passed unseen).
PATHS = (LIVENESS_PATH, READINESS_PATH, METRICS_PATH)

#: How often the heartbeat stamps the time, and how often the gates are read.
BEAT_SECONDS = 0.5
#: How often each probe asks its dependency, and how long one answer may take.
CHECK_SECONDS = 5.0
#: How old a probe's last success may be before the service is not ready: three checks, so one
#: slow answer or one broker leader moving never takes a replica out of rotation.
STALE_SECONDS = 15.0
#: The longest reason a probe keeps (an error's text can carry a whole server message).
MAX_REASON = 200

#: A probe's check: raises when its dependency cannot be reached.
Check = Callable[[], Awaitable[object]]
#: A gate: why the service is not ready yet (None: it passes). Read on the loop; no I/O.
Gate = Callable[[], str | None]

#: PostgreSQL answers a statement on a connection of the service's own pool: the one round trip
#: that proves a connection can be had and used, and reads or changes nothing.
POSTGRES_PING = "SELECT 1"


@dataclass
class _Probe:
    name: str
    check: Check
    last_ok: float | None = None
    #: The last attempt's error; None once an attempt succeeds.
    error: str | None = None

    def problem(self, now: float, stale_after: float) -> str | None:
        if self.last_ok is None:
            return f"{self.name}: {'unreachable: ' + self.error if self.error else 'not checked yet'}"
        age = now - self.last_ok
        if age <= stale_after:
            return None
        if self.error is not None:
            return f"{self.name}: unreachable for {age:.0f} s: {self.error}"
        # No failure, only no answer lately: the check itself has not run (a busy or stalled loop).
        return f"{self.name}: not checked for {age:.0f} s"


class Health:
    """A service's liveness and readiness: a heartbeat, its gates and its probes.

    Register the gates and probes, then serve them (`health_listener`), which starts the
    heartbeat on the running loop. ``clock`` is monotonic seconds (a test passes its own).
    """

    def __init__(
        self,
        service: str,
        *,
        stall_after: float,
        check_every: float = CHECK_SECONDS,
        stale_after: float = STALE_SECONDS,
        beat_every: float = BEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self.stall_after = stall_after
        self.check_every = check_every
        self.stale_after = stale_after
        self.beat_every = beat_every
        self._clock = clock
        self._probes: dict[str, _Probe] = {}
        self._gates: dict[str, Gate] = {}
        #: Written on the loop, read by the listener's thread: each a whole new value, never
        #: changed in place.
        self._beat: float | None = None
        self._gate_problems: tuple[str, ...] = ("starting: not checked yet",)
        #: Any of these set: the service is leaving (read from the thread: `is_set` reads a flag).
        self._stops: list[asyncio.Event] = []
        self._task: asyncio.Task[None] | None = None

    def probe(self, name: str, check: Check) -> None:
        """Ask ``check`` every `check_every` seconds; ready only while it succeeded lately."""
        self._probes[name] = _Probe(name, check)

    def gate(self, name: str, problem: Gate) -> None:
        """Ready only while ``problem()`` returns None; its text otherwise names what is missing."""
        self._gates[name] = problem

    def leaving_on(self, stop: asyncio.Event) -> None:
        """Not ready from the moment ``stop`` is set (a service whose own stop event follows the
        one its entry sets names both, so the probe sees the signal, not the drain's first step)."""
        if stop not in self._stops:
            self._stops = [*self._stops, stop]

    # -- the loop side ------------------------------------------------------------------------

    def start(self, stop: asyncio.Event) -> None:
        """Start the heartbeat, the gates and the probes on the running loop; ``stop`` set means
        the service is leaving (not ready). They run until `close`, through the drain."""
        if self._task is not None:
            return
        self.leaving_on(stop)
        self._beat = self._clock()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.service}-health")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for probe in self._probes.values():
                group.create_task(self._keep_checking(probe), name=f"{self.service}-health-{probe.name}")
            while True:
                self.beat()
                await asyncio.sleep(self.beat_every)

    def beat(self) -> None:
        """Stamp the heartbeat and read the gates (on the loop)."""
        self._beat = self._clock()
        self._gate_problems = tuple(self._read_gates())

    def _read_gates(self) -> Iterator[str]:
        for name, gate in self._gates.items():
            try:
                problem = gate()
            except Exception as err:  # noqa: BLE001 - a gate that fails is a problem to report
                problem = f"{type(err).__name__}: {err}"
            if problem is not None:
                yield f"{name}: {problem}"

    async def _keep_checking(self, probe: _Probe) -> None:
        while True:
            await self.check(probe.name)
            await asyncio.sleep(self.check_every)

    async def check(self, name: str) -> None:
        """Run probe ``name`` once and record what it found."""
        probe = self._probes[name]
        try:
            await asyncio.wait_for(probe.check(), timeout=self.check_every)
        except TimeoutError:
            probe.error = f"no answer within {self.check_every:g} s"
        except Exception as err:  # noqa: BLE001 - readiness reports any failure, as text
            probe.error = redact(f"{type(err).__name__}: {err}")[:MAX_REASON]
        else:
            probe.last_ok, probe.error = self._clock(), None

    # -- the answers (read from the listener's thread) -------------------------------------------

    def stalled_for(self) -> float:
        """Seconds since the heartbeat's last stamp (0 before it started)."""
        beat = self._beat
        return 0.0 if beat is None else max(0.0, self._clock() - beat)

    def liveness(self) -> tuple[int, str]:
        stalled = self.stalled_for()
        if stalled <= self.stall_after:
            return 200, "alive"
        return 503, f"event loop stalled for {stalled:.1f} s (more than {self.stall_after:g} s)"

    def problems(self) -> list[str]:
        """Why the service is not ready; empty when it is."""
        if any(stop.is_set() for stop in self._stops):
            return ["stopping"]
        found: list[str] = []
        status, stalled = self.liveness()
        if status != 200:
            found.append(stalled)
        found.extend(self._gate_problems)
        now = self._clock()
        found.extend(
            p for probe in list(self._probes.values()) if (p := probe.problem(now, self.stale_after))
        )
        return found

    def readiness(self) -> tuple[int, str]:
        problems = self.problems()
        if not problems:
            return 200, "ready"
        return 503, "not ready: " + "; ".join(problems)


# -- what the services register ----------------------------------------------------------------


def postgres_probe(pool: Pool) -> Check:
    """A connection of ``pool`` answers a statement."""

    async def ping() -> None:
        await pool.fetchval(POSTGRES_PING)

    return ping


def kafka_probe(producer: Producer) -> Check:
    """A broker answers ``producer``'s metadata request, over the producer's own connections."""
    return producer.check_cluster


class GroupMember(Protocol):
    """What `groups_joined` reads of a consumer (`slotflow.kafka.consumer.Consumer`)."""

    @property
    def group_id(self) -> str: ...

    @property
    def assignments(self) -> int: ...


def groups_joined(consumers: Callable[[], Iterable[GroupMember | None]]) -> Gate:
    """Each consumer (None: not started yet) has been assigned its share of its group at least
    once (an empty share counts: more members than partitions). Later rebalances do not count
    against it: they are the group at work."""

    def problem() -> str | None:
        waiting = []
        for consumer in consumers():
            if consumer is None:
                return "consumers not started yet"
            if consumer.assignments == 0:
                waiting.append(consumer.group_id)
        return f"not yet in group {', '.join(waiting)}" if waiting else None

    return problem


# -- the listener ------------------------------------------------------------------------------

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def health_app(
    health: Health, registry: CollectorRegistry
) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """The listener's WSGI application: the three paths, 404 for any other."""
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        if path == METRICS_PATH:
            answer: Iterable[bytes] = metrics(environ, start_response)
            return answer
        if method not in ("GET", "HEAD"):
            status, text = 405, f"{method} is not allowed: GET {', '.join(PATHS)}"
        elif path == LIVENESS_PATH:
            status, text = health.liveness()
        elif path == READINESS_PATH:
            status, text = health.readiness()
        else:
            status, text = 404, f"no such path {path!r}: {', '.join(PATHS)}"
        body = (text + "\n").encode()
        start_response(
            f"{status} {_REASONS[status]}",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [b"" if method == "HEAD" else body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    # A request thread never holds the process up at exit.
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes ask every few seconds: no access log."""


@contextlib.contextmanager
def health_listener(
    health: Health, registry: CollectorRegistry, *, port: int | None, host: str, stop: asyncio.Event
) -> Iterator[None]:
    """Serve http://host:port/metrics, /livez and /readyz from a thread of their own while the
    block runs, and run ``health``'s heartbeat, gates and probes on the running loop (nothing when
    no port: metrics and probes are off). ``stop`` set: the service is leaving, not ready."""
    if not port:
        yield
        return
    # The address family the host asks for (an IPv6 host binds an IPv6 socket).
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_Server):
        address_family = family

    server = make_server(host, port, health_app(health, registry), Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name=f"{health.service}-health", daemon=True)
    health.start(stop)
    thread.start()
    log.info("metrics and probes on http://%s:%d (%s)", host, port, ", ".join(PATHS))
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        health.close()


__all__ = [
    "LIVENESS_PATH",
    "METRICS_PATH",
    "PATHS",
    "READINESS_PATH",
    "Check",
    "Gate",
    "GroupMember",
    "Health",
    "groups_joined",
    "health_app",
    "health_listener",
    "kafka_probe",
    "postgres_probe",
]
