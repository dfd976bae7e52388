"""The Temporal peer: each workload on a Temporal dev server of its own, with two worker processes.

    python bench/peers/temporal.py <workload> --size N --pg-dsn DSN [--kafka-bootstrap HOST:PORT] [--workers 2]

Runs with the peers' virtualenv (temporalio installed; see install_temporal.py). The Temporal CLI
(TEMPORAL_CLI, else the cached build) serves `temporal server start-dev` on free ports with a SQLite
file in a scratch directory: a server per run, stopped (and killed if need be) when the run ends, so
runs never see each other's workflows. --pg-dsn and --kafka-bootstrap are accepted for the common
command line and unused: the dev server keeps its state in its own SQLite file.

How the workloads map to Temporal (the notes of each JSON line repeat it):

- jobs:      N workflows of one no-op activity each (Temporal has no bare job: the lightest unit
             with retries is an activity, which needs a workflow to schedule it). Latency is the
             server's start time to its close time for each workflow; per_second is N over the
             time from the first start request to the last close.
- workflows: N workflows of two no-op activities and a zero-length timer (``workflow.sleep(0)``,
             which Temporal records as a real TimerStarted/TimerFired pair); figures as for jobs.
- replay:    one workflow runs no-op activities in batches until its history has N events; its
             history is fetched and ``Replayer.replay_workflow`` timed on it (the default,
             sandboxed runner, as a worker uses).
- schedules: N Temporal Schedules on the cron ``* * * * *`` starting a no-op workflow; for the
             first minute boundary after all exist, lateness is each started workflow's start
             time minus its scheduled time (TemporalScheduledStartTime). Creation is timed first:
             when it projects past the budget the run stops and reports why (not measured).
- recovery:  N workflows wait for a signal in the workers' caches; both workers are SIGKILLed, new
             ones started at once and every workflow signalled at the kill (as slotflow's recovery
             run does); measured from the kill to the last workflow's completion.

The worker processes run this file as ``temporal.py worker --address HOST:PORT --task-queue Q``.
The last line on stdout is the contract's JSON object.
"""

import argparse
import asyncio
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO, TypeVar

# Run as a script, bench/peers/ comes first on sys.path; the shared contract is reached through
# bench/ as the `peers` package, as the other adapters do.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers.common import DEFAULT_SIZES, WORKLOADS, not_measured, percentile, result

Item = TypeVar("Item")

SYSTEM = "temporal"
#: The CLI release whose `go install` works here (it carries Temporal Server 1.29.1); later
#: releases carry a replace directive that `go install` refuses. install_temporal.py builds the same
#: (a unit test holds the two together).
CLI_VERSION = "1.5.1"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_CLI = REPO / ".cache" / "bench" / f"temporal-{CLI_VERSION}" / "temporal"
#: Extra `temporal server start-dev` arguments, for trying the server's settings (docs/benchmarks/
#: peers-temporal.md); the figures of record use none.
SERVER_ARGS_VARIABLE = "BENCH_TEMPORAL_SERVER_ARGS"
NAMESPACE = "default"
TASK_QUEUE = "bench"
#: A custom search attribute the recovery workflows set once they wait, so the adapter can count
#: the workflows a worker has taken up (visibility sees no workflow task otherwise).
WAITING_ATTRIBUTE = "BenchWaiting"
#: Start, create and signal requests in flight at once from the driving client.
CLIENT_CONCURRENCY = 100
#: How long creating the schedules may take before the schedule workload reports itself not
#: measured, and how many are created before the rate is projected.
SCHEDULE_CREATE_BUDGET_S = 600.0
SCHEDULE_PROBE = 1_000
READY_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1


# --- the pure parts: command line, figures, the JSON line -------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The Temporal peer's benchmark adapter.")
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--size", type=int, default=None, help="default: the issue's size for the workload")
    parser.add_argument("--pg-dsn", required=True, help="accepted for the common command line; unused")
    parser.add_argument(
        "--kafka-bootstrap", default=None, help="accepted for the common command line; unused"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    if args.size is None:
        args.size = DEFAULT_SIZES[args.workload]
    if args.size <= 0:
        parser.error("--size must be positive")
    if args.workers <= 0:
        parser.error("--workers must be positive")
    return args


def result_line(workload: str, size: int, metrics: Mapping[str, float], notes: str) -> str:
    """The JSON line of a measured workload; a non-finite figure is no measurement and refused."""
    return result(SYSTEM, workload, size, metrics, notes)


def not_measured_line(workload: str, reason: str) -> str:
    return not_measured(SYSTEM, workload, reason)


@dataclass(frozen=True)
class Execution:
    """What the server recorded of one finished workflow."""

    start: datetime
    close: datetime


def run_metrics(executions: Sequence[Execution], submitted_at: datetime) -> dict[str, float]:
    """per_second (first submission to last close) and per-workflow start-to-close p50/p99."""
    if not executions:
        raise ValueError("no executions")
    elapsed = (max(e.close for e in executions) - submitted_at).total_seconds()
    if elapsed <= 0:
        raise ValueError("the last close precedes the first submission")
    latencies = [(e.close - e.start).total_seconds() for e in executions]
    return {
        "per_second": len(executions) / elapsed,
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p99_ms": 1000 * percentile(latencies, 0.99),
    }


def lateness_metrics(fired: Sequence[tuple[datetime, datetime]]) -> dict[str, float]:
    """From (scheduled, started) pairs of one slot: lateness p50/p99 and slots fired per second.

    Slots per second is the count over the time from the slot's scheduled moment to the last start:
    how fast the system works through a boundary where every schedule is due at once.
    """
    if not fired:
        raise ValueError("nothing fired")
    lateness = [(started - scheduled).total_seconds() for scheduled, started in fired]
    span = max(lateness)
    return {
        "lateness_p50_ms": 1000 * percentile(lateness, 0.50),
        "lateness_p99_ms": 1000 * percentile(lateness, 0.99),
        "slots_per_second": len(fired) / span if span > 0 else float(len(fired)),
    }


def next_minute(moment: datetime) -> datetime:
    """The first whole minute strictly after ``moment``."""
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def slot_condition(slot: datetime) -> str:
    """A visibility query condition for the workflows a schedule started for ``slot``.

    A range over the slot's second: SQLite visibility matches no Datetime attribute by equality.
    """
    since, until = (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for moment in (slot, slot + timedelta(seconds=1))
    )
    return f"TemporalScheduledStartTime >= '{since}' AND TemporalScheduledStartTime < '{until}'"


_VERSION = re.compile(r"temporal version (?P<cli>\S+) \(Server (?P<server>[^,)]+)")


def parse_version(output: str) -> tuple[str, str]:
    """(CLI, Server) versions from ``temporal --version``: 'temporal version 1.5.1 (Server 1.29.1, UI 2.41.0)'."""
    match = _VERSION.search(output)
    if match is None:
        raise ValueError(f"not a temporal --version output: {output.strip()!r}")
    return match["cli"], match["server"]


def dev_server_command(cli: Path, db_file: Path, ports: "DevPorts") -> list[str]:
    """``temporal server start-dev`` on the given ports, headless, its state in ``db_file``."""
    return [
        str(cli),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(ports.frontend),
        "--http-port",
        str(ports.http),
        "--ui-port",
        str(ports.ui),
        "--metrics-port",
        str(ports.metrics),
        "--db-filename",
        str(db_file),
        "--search-attribute",
        f"{WAITING_ATTRIBUTE}=Bool",
        "--log-level",
        "warn",
    ]


@dataclass(frozen=True)
class DevPorts:
    frontend: int
    http: int
    ui: int
    metrics: int


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on the loopback now (held open together so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# --- processes: the dev server and the workers --------------------------------------------------


def _die_with_parent() -> None:
    """In a child before exec: SIGKILL it when the adapter dies, even by SIGKILL (Linux only).

    The server and the workers run in sessions of their own (so a kill reaches each whole group);
    without this a harness that kills a stuck adapter would leave them running.
    """
    with suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop(process: "subprocess.Popen[bytes]", grace_s: float = 10.0) -> None:
    """SIGTERM the process's group, then SIGKILL it if it has not gone within ``grace_s``."""
    if process.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def extra_server_args() -> list[str]:
    """More `start-dev` arguments from BENCH_TEMPORAL_SERVER_ARGS (e.g. SQLite pragmas); none by default."""
    return shlex.split(os.environ.get(SERVER_ARGS_VARIABLE, ""))


def temporal_cli() -> Path:
    return Path(os.environ.get("TEMPORAL_CLI", str(DEFAULT_CLI)))


@asynccontextmanager
async def dev_server(scratch: Path) -> AsyncIterator[tuple[str, str]]:
    """A fresh dev server, ready for the default namespace; yields (address, server version)."""
    from temporalio.client import Client
    from temporalio.service import RPCError

    cli = temporal_cli()
    version_output = subprocess.run(
        [str(cli), "--version"], capture_output=True, text=True, check=True
    ).stdout
    _, server_version = parse_version(version_output)
    ports = DevPorts(*free_ports(4))
    log = scratch / "server.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            dev_server_command(cli, scratch / "temporal.db", ports) + extra_server_args(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    address = f"127.0.0.1:{ports.frontend}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"temporal server start-dev exited {process.returncode}:\n{_tail(log)}")
            try:
                client = await Client.connect(address, namespace=NAMESPACE)
                # A listing answers only once the namespace and its visibility store are up.
                await client.count_workflows()
                break
            except (RuntimeError, RPCError):  # connection refused, namespace not there yet
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the dev server was not ready in {READY_TIMEOUT_S:.0f} s:\n{_tail(log)}"
                    ) from None
                await asyncio.sleep(0.2)
        yield address, server_version
    finally:
        _stop(process)


class Workers:
    """The worker processes: this file run as ``worker``, each announcing itself when it polls."""

    def __init__(self, address: str, count: int, scratch: Path) -> None:
        self.address = address
        self.count = count
        self.scratch = scratch
        self.processes: list[subprocess.Popen[bytes]] = []
        self.generation = 0

    def start(self) -> None:
        self.generation += 1
        for index in range(self.count):
            log = self.scratch / f"worker-{self.generation}-{index}.log"
            with log.open("wb") as log_file:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, str(Path(__file__).resolve()), "worker", "--address", self.address],
                        stdout=subprocess.PIPE,
                        stderr=log_file,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                )

    async def wait_ready(self) -> None:
        """Until every worker has printed its ready line (its pollers are running)."""
        loop = asyncio.get_running_loop()
        for index, process in enumerate(self.processes):
            assert process.stdout is not None
            line = await asyncio.wait_for(
                loop.run_in_executor(None, process.stdout.readline), READY_TIMEOUT_S
            )
            if line.strip() != b"ready":
                raise RuntimeError(
                    f"a worker did not start:\n{_tail(self.scratch / f'worker-{self.generation}-{index}.log')}"
                )

    def kill(self) -> None:
        """SIGKILL every worker: no shutdown, no goodbye to the server."""
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes:
            process.wait()
        self.processes = []

    def stop(self) -> None:
        for process in self.processes:
            _stop(process)
        self.processes = []


@contextmanager
def worker_pool(address: str, count: int, scratch: Path) -> Iterator[Workers]:
    workers = Workers(address, count, scratch)
    try:
        yield workers
    finally:
        workers.stop()


def run_worker(argv: Sequence[str]) -> None:
    """A worker process: polls the bench task queue until it is stopped or killed."""
    parser = argparse.ArgumentParser(description="A Temporal worker of the benchmark.")
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    args = parser.parse_args(argv)

    async def serve() -> None:
        from temporalio.client import Client
        from temporalio.worker import Worker

        client = await Client.connect(args.address, namespace=NAMESPACE)
        definitions = workflow_definitions()
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=definitions.WORKFLOWS,
            activities=definitions.ACTIVITIES,
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with worker:
            print("ready", flush=True)
            await stop.wait()

    asyncio.run(serve())


# --- the workloads --------------------------------------------------------------------------------


async def bounded(
    items: Sequence[Item], make: Callable[[Item], Awaitable[Any]], concurrency: int = CLIENT_CONCURRENCY
) -> list[Any]:
    """``make(item)`` for every item, at most ``concurrency`` at once, results in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Item) -> Any:
        async with gate:
            return await make(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


def workflow_definitions() -> Any:
    """temporal_workflows, which only the peers' virtualenv can import (beside this script)."""
    import temporal_workflows  # type: ignore[import-not-found]

    return temporal_workflows


async def wait_count(
    client: Any, query: str, expected: int, timeout_s: float, interval_s: float = 0.1
) -> None:
    """Until the visibility store counts ``expected`` workflows matching ``query``.

    A count that times out or finds the server busy is asked again: on a loaded box the server
    answers slowly while it works through the very workflows being counted.
    """
    from temporalio.service import RPCError, RPCStatusCode

    transient = {RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.RESOURCE_EXHAUSTED}
    deadline = time.monotonic() + timeout_s
    counted = 0
    while True:
        try:
            counted = (await client.count_workflows(query)).count
        except RPCError as error:
            if error.status not in transient:
                raise
            print(f"count of {query!r} failed, asking again: {error}", file=sys.stderr)
        if counted >= expected:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{counted} of {expected} workflows match {query!r} after {timeout_s:.0f} s")
        await asyncio.sleep(interval_s)


async def closed_executions(client: Any, workflow_type: str) -> list[Execution]:
    found = []
    async for execution in client.list_workflows(
        f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Completed'"
    ):
        found.append(Execution(start=execution.start_time, close=execution.close_time))
    return found


async def run_many(client: Any, workflow_type: str, size: int) -> tuple[list[Execution], datetime]:
    """Start ``size`` workflows of ``workflow_type``, wait for all to complete, return their times."""
    submitted_at = datetime.now(UTC)
    await bounded(
        range(size),
        lambda i: client.start_workflow(workflow_type, id=f"{workflow_type}-{i}", task_queue=TASK_QUEUE),
    )
    await wait_count(
        client, f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Completed'", size, 60 + size / 5
    )
    executions = await closed_executions(client, workflow_type)
    if len(executions) != size:
        raise RuntimeError(f"{len(executions)} of {size} {workflow_type} workflows completed")
    return executions, submitted_at


async def jobs(client: Any, workers: Workers, size: int) -> str:
    workers.start()
    await workers.wait_ready()
    executions, submitted_at = await run_many(client, "bench.job", size)
    return result_line(
        "jobs",
        size,
        run_metrics(executions, submitted_at),
        f"a job is a workflow of one no-op activity; {workers.count} worker processes; latency is the "
        "server's start-to-close time of each workflow",
    )


async def workflows(client: Any, workers: Workers, size: int) -> str:
    workers.start()
    await workers.wait_ready()
    executions, submitted_at = await run_many(client, "bench.flow", size)
    return result_line(
        "workflows",
        size,
        run_metrics(executions, submitted_at),
        "two no-op activities then a zero-length timer (workflow.sleep(0): a TimerStarted and a TimerFired); "
        f"{workers.count} worker processes; latency is each workflow's start-to-close time on the server",
    )


async def replay(client: Any, workers: Workers, size: int) -> str:
    from temporalio.worker import Replayer

    workers.start()
    await workers.wait_ready()
    handle = await client.start_workflow("bench.long", size, id="bench.long", task_queue=TASK_QUEUE)
    steps = await handle.result()
    history = await handle.fetch_history()
    events = len(history.events)
    replayer = Replayer(workflows=[workflow_definitions().LongHistory])
    timings = []
    for _ in range(4):
        started = time.perf_counter()
        await replayer.replay_workflow(history)
        timings.append(time.perf_counter() - started)
    # The first replay also imports the workflow into a fresh sandbox; the rest are steady state.
    warm = sorted(timings[1:])[len(timings[1:]) // 2]
    return result_line(
        "replay",
        size,
        {
            "events_per_second": events / warm,
            "cold_events_per_second": events / timings[0],
            "events": float(events),
        },
        f"a {events}-event history of {steps} no-op activities run {50} at a time, replayed with "
        "Replayer.replay_workflow (sandboxed runner); events_per_second is the median of three replays "
        "after a first, cold one",
    )


async def schedules(client: Any, workers: Workers, size: int) -> str:
    from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec

    workers.start()
    await workers.wait_ready()

    async def create(i: int) -> None:
        await client.create_schedule(
            f"tick-{i}",
            Schedule(
                action=ScheduleActionStartWorkflow("bench.tick", id=f"tick-{i}", task_queue=TASK_QUEUE),
                spec=ScheduleSpec(cron_expressions=["* * * * *"]),
            ),
        )

    created_from = time.monotonic()
    probe = min(size, SCHEDULE_PROBE)
    await bounded(range(probe), create)
    probe_s = time.monotonic() - created_from
    projected_s = probe_s * size / probe
    if projected_s > SCHEDULE_CREATE_BUDGET_S:
        return not_measured_line(
            "schedules",
            f"creating {probe} schedules took {probe_s:.1f} s ({probe / probe_s:.0f}/s): {size} would take "
            f"about {projected_s / 60:.0f} min, past the {SCHEDULE_CREATE_BUDGET_S / 60:.0f} min budget",
        )
    await bounded(range(probe, size), create)
    create_s = time.monotonic() - created_from

    # The first whole minute after every schedule exists: all of them are due then. Each started
    # workflow carries its slot in the TemporalScheduledStartTime search attribute, so one count
    # query a second follows the boundary without loading the server while it fires.
    slot = next_minute(datetime.now(UTC) + timedelta(seconds=1))
    await asyncio.sleep(max(0.0, (slot - datetime.now(UTC)).total_seconds()))
    query = f"WorkflowType = 'bench.tick' AND {slot_condition(slot)}"
    await wait_count(client, query, size, 60 + size / 5, interval_s=1.0)
    fired = [(slot, execution.start_time) async for execution in client.list_workflows(query)]
    if len(fired) != size:
        raise RuntimeError(f"{len(fired)} of {size} schedules fired the {slot:%H:%M} slot")
    return result_line(
        "schedules",
        size,
        lateness_metrics(fired),
        f"{size} Temporal Schedules on the cron '* * * * *' (created in {create_s:.1f} s, "
        f"{size / create_s:.0f}/s) starting a no-op workflow; lateness is each started workflow's start time "
        "minus its scheduled time (TemporalScheduledStartTime) for one minute boundary; fires on seconds: yes (calendar and interval "
        "specs take seconds); time zones: yes (ScheduleSpec.time_zone_name)",
    )


async def recovery(client: Any, workers: Workers, size: int) -> str:
    workers.start()
    await workers.wait_ready()
    await bounded(
        range(size), lambda i: client.start_workflow("bench.waiter", id=f"waiter-{i}", task_queue=TASK_QUEUE)
    )
    # Every workflow has run its first task on a worker (it is in that worker's cache).
    await wait_count(client, f"{WAITING_ATTRIBUTE} = true", size, 60 + size / 5)
    # As slotflow's recovery run does: the kill, a new process started at once, and every workflow
    # signalled at the kill (the signals wait on the server while no worker runs).
    killed_at = datetime.now(UTC)
    workers.kill()
    workers.start()

    async def signal_all() -> float:
        await bounded(range(size), lambda i: client.get_workflow_handle(f"waiter-{i}").signal("release"))
        return (datetime.now(UTC) - killed_at).total_seconds()

    async def ready() -> float:
        await workers.wait_ready()
        return (datetime.now(UTC) - killed_at).total_seconds()

    signal_s, ready_s = await asyncio.gather(signal_all(), ready())
    await wait_count(
        client, "WorkflowType = 'bench.waiter' AND ExecutionStatus = 'Completed'", size, 120 + size / 5
    )
    executions = await closed_executions(client, "bench.waiter")
    closes = [e.close for e in executions]
    return result_line(
        "recovery",
        size,
        {
            "seconds_to_progress": (max(closes) - killed_at).total_seconds(),
            "first_progress_s": (min(closes) - killed_at).total_seconds(),
            "workers_ready_s": ready_s,
            "signal_s": signal_s,
        },
        f"{size} workflows waiting for a signal, taken up by {workers.count} workers (each caches up to "
        "1,000, the SDK's default); all workers SIGKILLed, "
        "new ones started at once and every workflow signalled at the kill; seconds_to_progress is the "
        "kill to the last workflow completed (first_progress_s to the first; workers_ready_s until both "
        "new workers poll, process start included; signal_s until every signal was accepted). Tasks "
        "bound to a killed worker's sticky queue move to the shared queue only after the worker's "
        "sticky_queue_schedule_to_start_timeout (the Python SDK's default, 10 s)",
    )


WORKLOAD_FUNCTIONS: dict[str, Callable[[Any, Workers, int], Awaitable[str]]] = {
    "jobs": jobs,
    "workflows": workflows,
    "replay": replay,
    "schedules": schedules,
    "recovery": recovery,
}


async def measure(args: argparse.Namespace) -> str:
    from temporalio.client import Client

    scratch = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    try:
        async with dev_server(scratch) as (address, server_version):
            client = await Client.connect(address, namespace=NAMESPACE)
            with worker_pool(address, args.workers, scratch) as workers:
                line = await WORKLOAD_FUNCTIONS[args.workload](client, workers, args.size)
        record = json.loads(line)
        if "notes" in record:
            extra = " ".join(extra_server_args())
            record["notes"] += (
                f"; Temporal Server {server_version} (CLI {CLI_VERSION} start-dev, SQLite file"
                + (f", {extra}" if extra else ", default settings")
                + ")"
            )
        return json.dumps(record)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: Sequence[str], out: TextIO = sys.stdout) -> int:
    if argv[:1] == ["worker"]:
        run_worker(argv[1:])
        return 0
    args = parse_args(argv)
    if not temporal_cli().is_file():
        print(
            not_measured_line(args.workload, f"no Temporal CLI at {temporal_cli()}: run install_temporal.py"),
            file=out,
        )
        return 0
    print(asyncio.run(measure(args)), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
