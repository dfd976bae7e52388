"""The whole-system fault suite's machinery: a private stack, the service processes, the seeded
workload and fault plan, and the collection of what the checker judges.

The suite restarts Kafka and PostgreSQL, so it never runs on a shared devstack: it starts its own
broker and database through deploy/devstack with ports and a state directory of its own
(SLOTFLOW_SYSTEM_KAFKA_PORT etc.; by default the first free ones from 27092/27093/27432) and stops
only those. The ports sit below the kernel's ephemeral range on purpose: a port in that range can be
taken by any outgoing connection's local end, before the stack starts or while the suite has the
broker or database down for a restart.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import random
import secrets
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.commands import publish_command
from slotflow.contracts import (
    CancelWorkflow,
    CreateSchedule,
    CronSpec,
    ScheduleDefinition,
    SignalWorkflow,
    SigningKey,
    StartWorkflow,
    TriggerNow,
    wrap,
)
from slotflow.contracts.runs import JobDue
from slotflow.contracts.timers import FireJobDue, StartTimer, retry_timer_id
from slotflow.contracts.topics import (
    DLQ_EVENTS,
    DLQ_MESSAGES,
    DLQ_REDRIVES,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    SIGNING_KEYS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
    WORKFLOW_HISTORY,
    TopicSpec,
)
from slotflow.core.identity import run_id
from slotflow.errors import SlotflowError
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.producer import Producer
from slotflow.pg.statements import quote_ident, sql_with
from slotflow.principals import Signer
from slotflow.principals.signing import write_private_key
from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ServiceProcess
from tests.chaos.system.checker import (
    FORGED_BY,
    Effect,
    HostileRecord,
    OrderUnderTest,
    Recording,
    RedriveRequestSeen,
    ScheduleUnderTest,
    TimerUnderTest,
)
from tests.chaos.system.handlers import PARKING, create_tables
from tests.chaos.system.operator import Operator
from tests.chaos.system.proxy import FaultyProxy

REPO = Path(__file__).resolve().parents[3]
DEVSTACK = REPO / "deploy" / "devstack" / "devstack.py"
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), None)
LEASE_TTL_S = 3.0
#: Partitions per topic (the table's counts, capped: enough to spread work over the replicas).
PARTITIONS = 3
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
CRONS = ("* * * * * *", "*/2 * * * * *", "*/3 * * * * *", "*/5 * * * * *")
RUN_END_TYPES = {"run.completed", "run.failed", "run.dead_lettered", "run.skipped"}


@dataclass(frozen=True)
class Profile:
    name: str
    duration_s: float
    schedules: int
    timers: int
    orders: int
    faults: int
    #: The hostile actor's acts (hostile.py), each a few forged or unacceptable records.
    hostile: int = 0


PROFILES = {
    "short": Profile("short", 30, schedules=30, timers=10, orders=8, faults=6, hostile=10),
    "long": Profile("long", 3600, schedules=300, timers=400, orders=600, faults=400, hostile=400),
}


@dataclass(frozen=True)
class TopicRecord:
    """One record of a topic as the checker reads it: the envelope, and where and when it landed."""

    envelope: dict[str, Any]
    key: str
    partition: int
    offset: int
    #: The record's broker timestamp (the producer's CreateTime), UTC.
    timestamp: datetime


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_fixed_port(setting: str, preferred: int, taken: set[int]) -> int:
    """The port named by ``setting`` if set, else the first free one from ``preferred`` upward
    (below 32768, so never one the kernel hands out as a connection's local port: a service the
    suite restarts finds its port again)."""
    if setting and os.environ.get(setting):
        return int(os.environ[setting])
    for port in range(preferred, 32768):
        if port not in taken and _port_is_free(port):
            taken.add(port)
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 from {preferred} to 32767; set {setting}")


def kafka_listener_name(service: str) -> str:
    """The broker's listener for one service: `claimer-2` → `SVC_CLAIMER_2`."""
    return "SVC_" + service.upper().replace("-", "_")


def system_brokers() -> int:
    """SLOTFLOW_SYSTEM_BROKERS (`make chaos BROKERS=3`): the private stack's Kafka brokers, 1 or 3."""
    raw = os.environ.get("SLOTFLOW_SYSTEM_BROKERS", "").strip() or "1"
    if raw not in ("1", "3"):
        raise ValueError(f"SLOTFLOW_SYSTEM_BROKERS={raw!r}: expected 1 or 3")
    return int(raw)


class PrivateStack:
    """A Kafka broker (or three) and a PostgreSQL of the suite's own, through deploy/devstack."""

    def __init__(self) -> None:
        taken: set[int] = set()
        self.brokers = system_brokers()
        self.kafka_port = free_fixed_port("SLOTFLOW_SYSTEM_KAFKA_PORT", 27092, taken)
        controller_port = free_fixed_port("SLOTFLOW_SYSTEM_CONTROLLER_PORT", 27093, taken)
        # The devstack puts node n at the first two ports + 2(n-1) (deploy/devstack/_config.py).
        node_ports = [p + 2 * i for i in range(1, self.brokers) for p in (self.kafka_port, controller_port)]
        busy = [p for p in node_ports if p in taken or not _port_is_free(p)]
        if busy:
            raise RuntimeError(
                f"ports {busy} for brokers 2-3 are taken; set SLOTFLOW_SYSTEM_KAFKA_PORT and "
                "SLOTFLOW_SYSTEM_CONTROLLER_PORT to a free range"
            )
        taken.update(node_ports)
        self.pg_port = free_fixed_port("SLOTFLOW_SYSTEM_PG_PORT", 27432, taken)
        self.state_dir = os.environ.get("SLOTFLOW_SYSTEM_STACK_DIR") or tempfile.mkdtemp(
            prefix="slotflow-system-"
        )
        # mkdtemp makes it 0700; run as root, the devstack starts PostgreSQL as the postgres OS
        # user, which must be able to reach its data directory inside.
        os.makedirs(self.state_dir, exist_ok=True)
        os.chmod(self.state_dir, 0o755)  # noqa: S103 - a test stack's state, no secrets
        #: Per service, the broker's extra listener and the port it is advertised at, where that
        #: service's Kafka proxy listens (proxy.py): (listener port, proxy port).
        #: With three brokers there are none: a listener is one port on one broker, and a service
        #: would need a proxy per broker; the 3-broker mode runs without the Kafka network faults.
        self.kafka_routes = (
            {
                name: (free_fixed_port("", 27200, taken), free_fixed_port("", 27300, taken))
                for name in SERVICE_NAMES
            }
            if self.brokers == 1
            else {}
        )
        self.ports = taken
        self.env = {
            **os.environ,
            "SLOTFLOW_KAFKA_BROKERS": str(self.brokers),
            "SLOTFLOW_KAFKA_EXTRA_LISTENERS": ",".join(
                f"{kafka_listener_name(name)}:{port}:{proxy_port}"
                for name, (port, proxy_port) in self.kafka_routes.items()
            ),
            "SLOTFLOW_KAFKA_PORT": str(self.kafka_port),
            "SLOTFLOW_KAFKA_CONTROLLER_PORT": str(controller_port),
            "SLOTFLOW_PG_PORT": str(self.pg_port),
            "SLOTFLOW_DEVSTACK_DIR": self.state_dir,
        }
        self.bootstrap = ",".join(f"127.0.0.1:{self.kafka_port + 2 * i}" for i in range(self.brokers))
        self.admin_dsn = f"postgresql://slotflow@127.0.0.1:{self.pg_port}/slotflow"

    async def devstack(self, *args: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(DEVSTACK),
            *args,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"devstack {' '.join(args)} failed: {err.decode(errors='replace')[-2000:]}")

    async def up(self) -> None:
        await self.devstack("up")

    async def down(self) -> None:
        await self.devstack("down", "--clean")


@dataclass
class Fault:
    at_s: float
    kind: str
    target: str = ""

    def __str__(self) -> str:
        return f"t+{self.at_s:6.1f}s {self.kind} {self.target}".rstrip()


SERVICE_FAULTS = ("sigkill", "sigstop")
STACK_FAULTS = ("kafka_restart", "pg_restart_fast", "pg_restart_immediate")
#: Between one service and PostgreSQL, through its FaultyProxy: 200 ms on every chunk for 5 s;
#: nothing moving for lease + 2 s; every connection reset.
NETWORK_FAULTS = ("pg_latency", "pg_stall", "pg_drop")
#: The same three between one service and the broker (its own listener and proxy).
KAFKA_NETWORK_FAULTS = ("kafka_latency", "kafka_stall", "kafka_drop")
SERVICE_NAMES = (
    "ticker-0",
    "ticker-1",
    "claimer-0",
    "claimer-1",
    "claimer-2",
    "orchestrator-0",
    "orchestrator-1",
    "dlq",
    "api",
)


#: The 3-broker mode's own: SIGKILL one broker, start it again BROKER_DOWN_S later.
BROKER_FAULTS = ("broker_kill",)
BROKER_DOWN_S = 5.0


def fault_plan(seed: int, profile: Profile, services: list[str], brokers: int = 1) -> list[Fault]:
    """The seeded plan: the same seed gives the same faults at the same offsets."""
    rng = random.Random(seed)
    plan: list[Fault] = []
    # Faults in the first 85% of the run, at least a few seconds apart, so each settles a little.
    span = profile.duration_s * 0.85
    for i in range(profile.faults):
        at = 3 + span * (i + rng.random() * 0.5) / profile.faults
        kind = rng.choice((*SERVICE_FAULTS, *SERVICE_FAULTS, *STACK_FAULTS, "poison_burst"))
        target = rng.choice(services) if kind in SERVICE_FAULTS else ""
        plan.append(Fault(round(at, 1), kind, target))
    if LIBFAKETIME is not None:
        plan.append(Fault(round(1 + rng.random() * span / 2, 1), "clock_skew", "ticker-1"))
    # Network faults from a stream of their own, so adding them left every seed's other faults
    # where they were.
    net = random.Random(seed * 7919 + 17)
    for _ in range(max(1, profile.faults // 3)):
        at = 3 + net.random() * span
        plan.append(Fault(round(at, 1), net.choice(NETWORK_FAULTS), net.choice(services)))
    # Kafka's network faults came later still: a stream of their own as well.
    # (Not with three brokers: the services reach them without proxies, see PrivateStack.)
    if brokers == 1:
        kafka_net = random.Random(seed * 104729 + 31)
        for _ in range(max(1, profile.faults // 3)):
            at = 3 + kafka_net.random() * span
            plan.append(
                Fault(round(at, 1), kafka_net.choice(KAFKA_NETWORK_FAULTS), kafka_net.choice(services))
            )
    else:
        # Broker kills from a stream of their own too: the 3-broker mode moves no other fault.
        broker_rng = random.Random(seed * 15485863 + 47)
        for _ in range(max(1, profile.faults // 3)):
            at = 3 + broker_rng.random() * span
            plan.append(Fault(round(at, 1), "broker_kill", str(broker_rng.randint(1, brokers))))
    return sorted(plan, key=lambda f: f.at_s)


def given_plan(spec: str) -> list[Fault]:
    """A plan written out instead of drawn from the seed (reproducing one fault):
    `"21.4:pg_restart_fast,30:sigkill:claimer-1"` (offset in seconds, kind, target)."""
    plan: list[Fault] = []
    for item in spec.split(","):
        if not item.strip():
            continue
        at, kind, *target = item.strip().split(":")
        if kind not in (
            *SERVICE_FAULTS,
            *STACK_FAULTS,
            *NETWORK_FAULTS,
            *KAFKA_NETWORK_FAULTS,
            *BROKER_FAULTS,
            "poison_burst",
            "clock_skew",
        ):
            raise ValueError(f"unknown fault kind {kind!r} in {spec!r}")
        plan.append(Fault(float(at), kind, target[0] if target else ""))
    return sorted(plan, key=lambda f: f.at_s)


@dataclass
class Workload:
    seed: int
    profile: Profile
    namespace: str
    schedules: list[ScheduleUnderTest] = field(default_factory=list)
    timers: list[TimerUnderTest] = field(default_factory=list)
    orders: list[OrderUnderTest] = field(default_factory=list)
    poison_keys: list[str] = field(default_factory=list)
    invalid_commands: list[str] = field(default_factory=list)
    malformed_signals: list[str] = field(default_factory=list)
    #: What the hostile actor wrote, for the checker (set once the workload is over).
    hostile: list[HostileRecord] = field(default_factory=list)


#: The share of orders cancelled mid-saga, and when: a cancel lands in a forward step, the 2 s hold,
#: the capture or a declined order's compensation, or after the saga ended (then it is rejected).
CANCEL_SHARE = 0.3
CANCEL_AFTER_S = (0.0, 6.0)
#: The share of orders sent a `note` signal whose payload the handler's `Note` cannot take.
MALFORMED_SIGNAL_SHARE = 0.3
MALFORMED_NOTE = {"text": 42, "urgent": "maybe"}


class System:
    """The private stack's services for one seed: topics in a namespace, a database of its own."""

    def __init__(self, stack: PrivateStack, seed: int, profile: Profile, log_dir: Path) -> None:
        self.stack, self.seed, self.profile, self.log_dir = stack, seed, profile, log_dir
        self.namespace = f"sys{seed}x{int(time.time())}"
        self.database = self.namespace
        self.dsn = f"postgresql://slotflow@127.0.0.1:{stack.pg_port}/{self.database}"
        self.kafka = KafkaSettings(bootstrap=stack.bootstrap, topic_namespace=self.namespace)
        self.services: dict[str, ServiceProcess] = {}
        #: Ports handed to this seed's services (kept below the ephemeral range, see free_fixed_port).
        self._ports: set[int] = set(stack.ports)
        self.workload = Workload(seed, profile, self.namespace)
        #: Sends timed after the moment they were planned (the mid-saga cancels).
        self.sends: list[asyncio.Future[None]] = []
        self.log: list[str] = []
        self.counts: dict[str, int] = {}
        #: Each service reaches PostgreSQL through its own proxy (the network faults)...
        self.proxies: dict[str, FaultyProxy] = {}
        #: ... and the broker through another, at the port its listener is advertised at.
        self.kafka_proxies: dict[str, FaultyProxy] = {}
        # Commands must be signed (SLOTFLOW_COMMAND_SIGNATURES=required on every service), so a
        # forged principal is refused, not applied: the workload signs as `key:system`, the claimers
        # and orchestrators with keys of their own (their timer commands), all `admin` like a
        # deployment's service keys; `key:mallory` is the hostile actor's insider, `operate` only.
        self.signers = {
            name: Signer(Ed25519PrivateKey.generate(), f"key:{name}")
            for name in ("system", "claimer", "orchestrator", "mallory")
        }
        self.signer = self.signers["system"]
        #: The operator's admin token for the api (its bootstrap token, in this seed's api only).
        self.api_token = secrets.token_urlsafe(32)
        #: Redrives and retries through the api (operator.py); its address is known once started.
        self.operator = Operator(seed, "", self.api_token, self.dsn, self.say)

    def say(self, line: str) -> None:
        self.log.append(line)
        # The seed, the plan and the verdict go to the terminal as they happen (pytest -s, make chaos).
        sys.stdout.write(f"system[{self.seed}] {line}\n")
        sys.stdout.flush()

    async def prepare(self) -> None:
        for name in SERVICE_NAMES:
            proxy = FaultyProxy(name, "127.0.0.1", self.stack.pg_port)
            await proxy.start()
            self.proxies[name] = proxy
            if name not in self.stack.kafka_routes:
                continue  # three brokers: no Kafka proxies
            listener_port, proxy_port = self.stack.kafka_routes[name]
            kafka_proxy = FaultyProxy(f"{name}/kafka", "127.0.0.1", listener_port)
            await kafka_proxy.start(proxy_port)
            self.kafka_proxies[name] = kafka_proxy
        admin = await asyncpg.connect(self.stack.admin_dsn)
        try:
            await admin.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            await admin.close()
        conn = await asyncpg.connect(self.dsn)
        try:
            await create_tables(conn)
        finally:
            await conn.close()
        specs = [
            s.model_copy(update={"partitions": min(s.partitions, PARTITIONS)}) for s in self.kafka.topics()
        ]
        await ensure_topics(self.kafka.bootstrap, specs)
        await self.register_keys()

    async def register_keys(self) -> None:
        """Put the suite's keys on the keys topic as the api's relay does once an admin registered
        them (the api's own path, POST /v1/keys, is tested by tests/integration/security): the
        services read it from the start before they check a command."""
        async with Producer(self.kafka, client_id="system-keys") as producer:
            for name, signer in self.signers.items():
                key = SigningKey(
                    key_id=signer.key_id,
                    name=name,
                    principal=signer.principal,
                    scope="operate" if name == "mallory" else "admin",
                    public_key=signer.public_key,
                    created_at=datetime.now(UTC),
                    created_by="system-suite",
                )
                envelope = wrap(
                    key,
                    id=f"{key.key_id}/registered",
                    key=key.key_id,
                    source="system",
                    occurred_at=key.created_at,
                )
                await producer.send(self.kafka.topic(SIGNING_KEYS), envelope)

    def _signing_env(self, name: str) -> dict[str, str]:
        """A claimer's or orchestrator's own key (they sign their timer commands)."""
        path = self.log_dir / f"{name}.pem"
        if not path.exists():
            write_private_key(path, self.signers[name].private_key)
        return {"SLOTFLOW_SIGNING_KEY_FILE": str(path), "SLOTFLOW_SIGNING_PRINCIPAL": f"key:{name}"}

    def _env(self, name: str) -> dict[str, str]:
        # ServiceProcess adds the rest of the environment, without the runner's own SLOTFLOW_*.
        proxy = self.proxies[name]
        return {
            "SLOTFLOW_KAFKA_BOOTSTRAP": (
                f"127.0.0.1:{self.kafka_proxies[name].port}"
                if name in self.kafka_proxies
                else self.stack.bootstrap
            ),
            "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": self.namespace,
            "SLOTFLOW_PG_DSN": f"postgresql://slotflow@127.0.0.1:{proxy.port}/{self.database}",
            "PYTHONPATH": str(REPO),
            "SLOTFLOW_COMMAND_SIGNATURES": "required",
        }

    def start_services(self) -> None:
        for i in range(2):
            name = f"ticker-{i}"
            env = {**self._env(name), "SLOTFLOW_TICKER_TICKER_ID": name, "SLOTFLOW_TICKER_METRICS_PORT": "0"}
            self.services[name] = ServiceProcess(
                "slotflow_ticker",
                name,
                env=env,
                log_dir=self.log_dir,
                cwd=REPO,
                args=("--log-level", "INFO", "run"),
            )
        for i in range(3):
            name = f"claimer-{i}"
            env = {
                **self._env(name),
                "SLOTFLOW_CLAIMER_CLAIMER_ID": name,
                "SLOTFLOW_CLAIMER_HANDLER_MODULES": "tests.chaos.system.handlers",
                "SLOTFLOW_CLAIMER_METRICS_PORT": str(free_fixed_port("", 27500, self._ports)),
                "SLOTFLOW_CLAIMER_LEASE_TTL_SECONDS": str(LEASE_TTL_S),
                **self._signing_env("claimer"),
            }
            self.services[name] = ServiceProcess(
                "slotflow_claimer", name, env=env, log_dir=self.log_dir, cwd=REPO
            )
        for i in range(2):
            name = f"orchestrator-{i}"
            env = {
                **self._env(name),
                "SLOTFLOW_ORCHESTRATOR_INSTANCE_ID": name,
                "SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES": "tests.chaos.system.workflow",
                "SLOTFLOW_ORCHESTRATOR_METRICS_PORT": str(free_fixed_port("", 27500, self._ports)),
                **self._signing_env("orchestrator"),
            }
            self.services[name] = ServiceProcess(
                "slotflow_orchestrator", name, env=env, log_dir=self.log_dir, cwd=REPO
            )
        # Port 0: the default (9340) may be taken on a shared machine, and a dlq that cannot bind
        # its metrics exits at start, again and again.
        dlq_env = {**self._env("dlq"), "SLOTFLOW_DLQ_METRICS_PORT": "0"}
        self.services["dlq"] = ServiceProcess(
            "slotflow_dlq", "dlq", env=dlq_env, log_dir=self.log_dir, cwd=REPO
        )
        api_port = free_fixed_port("", 27500, self._ports)
        api_env = {
            **self._env("api"),
            "SLOTFLOW_API_PORT": str(api_port),
            "SLOTFLOW_API_BOOTSTRAP_TOKEN": self.api_token,
        }
        self.operator.base_url = f"http://127.0.0.1:{api_port}"
        self.services["api"] = ServiceProcess(
            "slotflow_api", "api", env=api_env, log_dir=self.log_dir, cwd=REPO
        )

    def supervise(self) -> None:
        """Restart a service that exited, as a deployment's supervisor would; each is counted."""
        for name, service in self.services.items():
            if not service.alive():
                self.say(f"{name} exited ({service.proc.returncode}); restarting it")
                self.counts["exited, restarted"] = self.counts.get("exited, restarted", 0) + 1
                service.start()

    async def wait_ready(self, timeout: float = 180.0) -> None:
        """Until every ticker holds a database connection and every claimer and orchestrator serves
        its metrics: the workload's first slots must not fall into the services' start-up."""
        ports = [
            int(s.env[k])
            for s in self.services.values()
            for k in s.env
            if k.endswith("_METRICS_PORT") and s.env[k] != "0"
        ]
        tickers = [f"slotflow-ticker-{n}" for n in self.services if n.startswith("ticker-")]
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                self.supervise()
                conn = await asyncpg.connect(self.dsn)
                try:
                    connected = await conn.fetchval(
                        "SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name = ANY($1)",
                        tickers,
                    )
                finally:
                    await conn.close()
                serving = 0
                for port in ports:
                    try:
                        await client.get(f"http://127.0.0.1:{port}/metrics")
                        serving += 1
                    except httpx.HTTPError:
                        pass
                if connected == len(tickers) and serving == len(ports):
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"services not ready: {connected} tickers, {serving}/{len(ports)} metrics"
                    )
                await asyncio.sleep(1.0)

    async def claimer_gauges(self) -> dict[str, str]:
        """Each claimer's runs in flight, from its metrics: a claimer whose executor is full or
        whose intake stopped shows here when the verdict is not clean."""
        out: dict[str, str] = {}
        async with httpx.AsyncClient(timeout=2.0) as client:
            for name, service in self.services.items():
                port = service.env.get("SLOTFLOW_CLAIMER_METRICS_PORT")
                if port is None:
                    continue
                try:
                    text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
                except httpx.HTTPError as err:
                    out[name] = f"metrics unavailable: {err!r}"
                    continue
                lines = [
                    line for line in text.splitlines() if line.startswith("slotflow_claimer_runs_in_flight")
                ]
                out[name] = "; ".join(lines)
        return out

    def fence_refusals(self) -> list[datetime]:
        """When the claimers' logs say the fence refused a stale write (a handler's write or an
        outcome under a claim that was taken over): for the per-fault-kind figures only, never
        for the verdict, which reads no service's own output."""
        moments: list[datetime] = []
        for log in sorted(self.log_dir.glob("claimer-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if "FenceRejected" not in line:
                    continue
                try:
                    # The services log local time, "2026-12-05 12:22:18,152 LEVEL ...".
                    moments.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC))
                except ValueError:
                    continue  # a traceback's line that names the exception
        return moments

    def stop_services(self) -> None:
        for service in self.services.values():
            service.stop()

    async def close_proxies(self) -> None:
        await self.operator.close()
        for proxy in (*self.proxies.values(), *self.kafka_proxies.values()):
            await proxy.close()

    async def db_now(self) -> datetime:
        conn = await asyncpg.connect(self.dsn)
        try:
            now: datetime = await conn.fetchval("SELECT now()")
            return now
        finally:
            await conn.close()

    async def send_workload(self, producer: Producer, start_at: datetime) -> None:
        rng = random.Random(self.seed * 7919)
        w = self.workload
        end_at = start_at + timedelta(seconds=self.profile.duration_s)
        for i in range(self.profile.schedules):
            sid = f"pay-{i}"
            spec = CronSpec(expression=rng.choice(CRONS), timezone=rng.choice(ZONES))
            definition = ScheduleDefinition(
                spec=spec, handler="system.payout", overlap="allow", start_at=start_at, end_at=end_at
            )
            await publish_command(
                producer,
                self.kafka,
                CreateSchedule(schedule_id=sid, definition=definition),
                source="system",
                signer=self.signer,
            )
            w.schedules.append(ScheduleUnderTest(sid, spec.expression, spec.timezone, start_at, end_at))
        for i in range(self.profile.timers):
            fire_at = start_at + timedelta(seconds=rng.uniform(1, self.profile.duration_s))
            job_id = f"timer-{i}"
            # The run id is the job's and slot's (`core.identity.run_id`): consumers refuse any other.
            # A timer fires a run's next attempt under the id that names it, as the claimer's
            # retries do (the ticker refuses any other id, and a first attempt).
            rid = run_id(job_id, fire_at)
            job = JobDue(
                run_id=rid,
                job_id=job_id,
                slot=fire_at,
                attempt=2,
                kind="retry",
                handler="system.payout",
                payload={"kind": "timer"},
            )
            await publish_command(
                producer,
                self.kafka,
                StartTimer(timer_id=retry_timer_id(rid, 2), fire_at=fire_at, on_fire=FireJobDue(job=job)),
                source="system",
                signer=self.signer,
            )
            w.timers.append(TimerUnderTest(rid, fire_at))

    async def start_orders(self, producer: Producer, rng: random.Random, count: int) -> None:
        for _ in range(count):
            n = len(self.workload.orders)
            declines = rng.random() < 0.3
            cancel_after = rng.uniform(*CANCEL_AFTER_S) if rng.random() < CANCEL_SHARE else None
            malformed = rng.random() < MALFORMED_SIGNAL_SHARE
            # From the operator's own stream, so the draws above stay each seed's.
            parks, parked_declines = self.operator.parks()
            declines = declines or parked_declines
            wid = f"order-{PARKING + '-' if parks else ''}{'decline-' if declines else ''}{n}"
            workflow_type = "system.checkout.parking" if parks else "system.checkout"
            await publish_command(
                producer,
                self.kafka,
                StartWorkflow(workflow_id=wid, workflow_type=workflow_type, input={"order_id": wid}),
                command_id=f"start-{wid}",
                source="system",
                signer=self.signer,
            )
            self.workload.orders.append(
                OrderUnderTest(wid, declines, cancelled=cancel_after is not None, parks=parks)
            )
            if parks:
                # The operator resumes its parked step, then sees both doors refuse once it closed.
                self.sends.append(asyncio.ensure_future(self.operator.tend(wid)))
            if malformed:
                # Keyed like the start, so it arrives after it: the run is there to refuse it for.
                signal_id = f"bad-note-{wid}"
                bad = SignalWorkflow(workflow_id=wid, signal="note", payload=MALFORMED_NOTE)
                await publish_command(
                    producer, self.kafka, bad, command_id=signal_id, source="system", signer=self.signer
                )
                self.workload.malformed_signals.append(signal_id)
            if cancel_after is not None:
                self.sends.append(asyncio.ensure_future(self._cancel_later(producer, wid, cancel_after)))

    async def _cancel_later(self, producer: Producer, workflow_id: str, after_s: float) -> None:
        await asyncio.sleep(after_s)
        cancel = CancelWorkflow(workflow_id=workflow_id, reason=f"workload cancel after {after_s:.1f} s")
        deadline = time.monotonic() + 90.0
        while True:  # rides out the broker faults, as the workload's other sends do
            try:
                await publish_command(
                    producer,
                    self.kafka,
                    cancel,
                    command_id=f"cancel-{workflow_id}",
                    source="system",
                    signer=self.signer,
                )
                return
            except (SlotflowError, OSError, KafkaError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1.0)

    async def finish_sends(self) -> None:
        """Wait for the cancels still to be sent (each its own task, timed after its order's start)
        and the operator's acts on the parking orders."""
        await asyncio.gather(*self.sends)
        self.sends.clear()

    async def poison(self, raw: AIOKafkaProducer, count: int) -> None:
        for _ in range(count):
            key = f"poison-{len(self.workload.poison_keys)}"
            topic = self.kafka.topic(
                SCHEDULE_COMMANDS if len(self.workload.poison_keys) % 2 else WORKFLOW_COMMANDS
            )
            await raw.send_and_wait(topic, key=key.encode(), value=b"\xff{not json " + key.encode())
            self.workload.poison_keys.append(key)

    async def invalid_command(self, producer: Producer) -> None:
        cid = f"bad-trigger-{len(self.workload.invalid_commands)}"
        await publish_command(
            producer,
            self.kafka,
            TriggerNow(schedule_id=f"no-such-{cid}"),
            command_id=cid,
            source="system",
            signer=self.signer,
        )
        self.workload.invalid_commands.append(cid)

    async def inject(self, fault: Fault) -> None:
        self.counts[fault.kind] = self.counts.get(fault.kind, 0) + 1
        if fault.kind == "sigkill":
            service = self.services[fault.target]
            service.kill()
            await asyncio.sleep(1.0)
            service.start()
        elif fault.kind == "sigstop":
            service = self.services[fault.target]
            service.signal(signal.SIGSTOP)
            await asyncio.sleep(LEASE_TTL_S + 2.0)
            service.signal(signal.SIGCONT)
        elif fault.kind == "kafka_restart":
            await self.stack.devstack("restart-kafka")
        elif fault.kind == "broker_kill":
            await self.stack.devstack(
                "restart-kafka", "--node", fault.target, "--kill", "--down", str(BROKER_DOWN_S)
            )
        elif fault.kind == "pg_restart_fast":
            await self.stack.devstack("restart-postgres")
        elif fault.kind == "pg_restart_immediate":
            await self.stack.devstack("restart-postgres", "--immediate")
        elif fault.kind == "clock_skew":
            service = self.services[fault.target]
            service.kill()
            service.extra_env = {
                "LD_PRELOAD": str(LIBFAKETIME),
                "FAKETIME": "+20s",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
            service.start()
        elif fault.kind == "pg_latency":
            await self.proxies[fault.target].latency(0.2, for_s=5.0)
        elif fault.kind == "pg_stall":
            await self.proxies[fault.target].stall(for_s=LEASE_TTL_S + 2.0)
        elif fault.kind == "pg_drop":
            dropped = self.proxies[fault.target].drop()
            self.say(f"    {fault.target}: {dropped} PostgreSQL connections reset")
        elif fault.kind == "kafka_latency":
            await self.kafka_proxies[fault.target].latency(0.2, for_s=5.0)
        elif fault.kind == "kafka_stall":
            await self.kafka_proxies[fault.target].stall(for_s=LEASE_TTL_S + 2.0)
        elif fault.kind == "kafka_drop":
            dropped = self.kafka_proxies[fault.target].drop()
            self.say(f"    {fault.target}: {dropped} Kafka connections reset")
        elif fault.kind != "poison_burst":
            raise ValueError(f"unknown fault {fault.kind}")

    # ---- collection -------------------------------------------------------------------------

    async def collect(self) -> Recording:
        w = self.workload
        rec = Recording(
            schedules=list(w.schedules),
            timers=list(w.timers),
            orders=list(w.orders),
            poison_keys=list(w.poison_keys),
            invalid_commands=list(w.invalid_commands),
            malformed_signals=list(w.malformed_signals),
            hostile=list(w.hostile),
            operator_retries=list(self.operator.retries),
            operator_redrives=list(self.operator.redrives),
        )
        for envelope, _ in await self.read_topic(SCHEDULE_EVENTS):
            data = envelope.get("data", {})
            if envelope.get("type") == "slot.skipped":
                rec.skipped.add(data["run_id"])
            elif envelope.get("type") == "slots.rerun":
                for rerun in data.get("reruns", []):
                    if rerun.get("forced"):
                        rec.operator_reruns[str(rerun["run_id"])] = (
                            f"{data.get('principal') or 'unnamed'}: {data.get('reason', '')}"
                        )
            elif envelope.get("type") == "command.rejected":
                rec.rejected[data["command_id"]] = data["reason"]
                continue
            elif envelope.get("type") == "command.accepted":
                rec.accepted.add(data.get("command_id", ""))
            if data.get("schedule_id"):
                rec.schedules_seen.add(str(data["schedule_id"]))
        for envelope, _ in await self.read_topic(JOBS_DUE):
            data = envelope.get("data", {})
            payload = data.get("payload")
            rec.jobs_due.add(
                (str(data.get("job_id", "")), str(payload.get("to", "")) if isinstance(payload, dict) else "")
            )
        for envelope, _ in await self.read_topic(RUN_EVENTS):
            run = envelope.get("data", {}).get("run_id")
            if envelope.get("type") == "run.started":
                rec.runs_started.add(run)
            elif envelope.get("type") in RUN_END_TYPES:
                rec.runs_ended.add(run)
                if envelope["type"] == "run.skipped":
                    rec.skipped.add(run)
        registered: dict[str, dict[int, str]] = {}
        for record in await self.read_records(WORKFLOW_HISTORY):
            envelope, key = record.envelope, record.key
            data = envelope.get("data", {})
            kind = envelope.get("type")
            _see_history(rec, record)
            if kind in ("workflow.completed", "workflow.failed", "workflow.cancelled"):
                rec.workflows_ended[data.get("workflow_id") or key] = kind
            elif kind == "workflow.compensation_registered":
                # By sequence: a republished event (the relay's at-least-once) counts once.
                undo = str(data.get("activity", "")).removeprefix("system.")
                registered.setdefault(data.get("workflow_id") or key, {})[int(data.get("sequence", 0))] = undo
            elif kind == "workflow.signal_received" and data.get("command_id"):
                rec.signals_received.add(data["command_id"])
        rec.compensations_registered = {
            wid: [undo for _, undo in sorted(by_sequence.items())] for wid, by_sequence in registered.items()
        }
        for envelope, _ in await self.read_topic(WORKFLOW_EVENTS):
            if envelope.get("type") == "command.rejected":
                rec.rejected[envelope["data"]["command_id"]] = envelope["data"]["reason"]
            elif envelope.get("type") == "command.accepted":
                rec.accepted.add(envelope["data"].get("command_id", ""))
        for envelope, _ in await self.read_topic(DLQ_EVENTS):
            if envelope.get("type") == "command.rejected":
                rec.rejected[envelope["data"]["command_id"]] = envelope["data"]["reason"]
            elif envelope.get("type") == "command.accepted":
                rec.accepted.add(envelope["data"].get("command_id", ""))
        for envelope, _ in await self.read_topic(DLQ_REDRIVES):
            data = envelope.get("data", {})
            if envelope.get("type") == "dlq.redrive_requested":
                rec.redrive_requests[str(data["request_id"])] = RedriveRequestSeen(
                    str(data["request_id"]),
                    str(data["dead_letter_id"]),
                    str(data["command_id"]),
                    str(data["target"]),
                    str(data["kind"]),
                    data.get("workflow_id"),
                    data.get("sequence"),
                )
        for envelope, _ in await self.read_topic(DLQ_MESSAGES):
            data = envelope.get("data", {})
            if envelope.get("type") == "dlq.redrive_outcome":
                # The first answer of a request counts (the dlq's rule); anyone may write this
                # topic, so only the requests the dlq staged are judged (by their random ids).
                rec.redrive_outcomes.setdefault(
                    str(data.get("request_id")), (str(data.get("outcome")), str(data.get("reason", "")))
                )
                continue
            if data.get("key"):
                rec.parked[data["key"]] = data.get("reason", "")
            origin = f"{data.get('topic')}:{data.get('partition')}:{data.get('offset')}"
            rec.letters.setdefault(origin, []).append(
                (str(data.get("source_service", "")), str(data.get("reason", "")))
            )
        # The database last, after the topics: an effect is committed before the result that
        # reports it is published, so every ended workflow and run read above has its effects
        # in what is read here. The other order saw sagas end with their last steps' effects
        # missing while the backlog drained (the topics take seconds to read).
        conn = await asyncpg.connect(self.dsn)
        try:
            rec.letter_statuses = {
                r["id"]: r["status"] for r in await conn.fetch("SELECT id, status FROM dlq.dead_letters")
            }
            for r in await conn.fetch("SELECT * FROM system_effects ORDER BY seq"):
                rec.effects.append(
                    Effect(
                        r["seq"],
                        r["kind"],
                        r["subject"],
                        r["run_id"],
                        r["phase"],
                        r["fence_token"],
                        r["owner"],
                        r["at"],
                    )
                )
            rec.ledger = {
                r["run_id"]: r["fence_token"] for r in await conn.fetch("SELECT * FROM system_ledger")
            }
            outboxes = await conn.fetch(
                "SELECT table_schema, table_name FROM information_schema.columns "
                "WHERE table_name LIKE '%outbox%' AND column_name = 'published_at'"
            )
            for o in outboxes:
                unpublished = sql_with(
                    "SELECT * FROM {schema}.{table} WHERE published_at IS NULL",
                    o["table_schema"],
                    table=quote_ident(o["table_name"]),
                )
                for r in await conn.fetch(unpublished):
                    rec.unpublished.append(
                        f"{o['table_schema']}.{o['table_name']}:{dict(r).get('event_id', '?')}"
                    )
        finally:
            await conn.close()
        return rec

    async def read_topic(self, spec: TopicSpec) -> list[tuple[dict[str, Any], str]]:
        """Every record of the namespaced topic, from the start to its end now: envelope and key."""
        return [(record.envelope, record.key) for record in await self.read_records(spec)]

    async def read_records(self, spec: TopicSpec) -> list[TopicRecord]:
        """Every record of the namespaced topic, from the start to its end now."""
        topic = self.kafka.topic(spec)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.kafka.bootstrap, enable_auto_commit=False)
        await consumer.start()
        out: list[TopicRecord] = []
        try:
            parts = [TopicPartition(topic, p) for p in range(min(spec.partitions, PARTITIONS))]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            remaining = {tp for tp in parts if ends[tp] > 0}
            while remaining:
                batch = await consumer.getmany(timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        try:
                            envelope = json.loads(record.value or b"{}")
                        except ValueError:
                            continue
                        out.append(
                            TopicRecord(
                                envelope,
                                (record.key or b"").decode(errors="replace"),
                                record.partition,
                                record.offset,
                                datetime.fromtimestamp(record.timestamp / 1000, UTC),
                            )
                        )
                    if records and records[-1].offset + 1 >= ends[tp]:
                        remaining.discard(tp)
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
        finally:
            await consumer.stop()
        return out


def _see_history(rec: Recording, record: TopicRecord) -> None:
    """What the forged-result and early-sleep rules read of one history record."""
    envelope = record.envelope
    data = envelope.get("data", {})
    kind = envelope.get("type")
    workflow_id = str(data.get("workflow_id") or record.key)
    rec.history_workflows.add(workflow_id)
    if data.get("command_id"):
        rec.history_commands.add(str(data["command_id"]))
    if FORGED_BY in json.dumps(data):
        rec.forged_marks.append(
            f"{kind} of {workflow_id} at partition {record.partition} offset {record.offset}"
        )
    if kind == "workflow.activity_scheduled":
        rec.activity_runs[(workflow_id, int(data["sequence"]))] = str(data["run_id"])
    elif kind == "workflow.activity_completed":
        # By the event's own sequence: a republished event (the relay's at-least-once) counts once.
        rec.activity_results[(workflow_id, int(data["sequence"]))] = (
            int(data["scheduled_sequence"]),
            data.get("result"),
        )
    elif kind == "workflow.completed":
        rec.workflow_results[workflow_id] = data.get("result")
    elif kind == "workflow.activity_parked":
        rec.activities_parked.add((workflow_id, int(data["scheduled_sequence"])))
    elif kind == "workflow.activity_retried":
        rec.activity_retries[(workflow_id, int(data["sequence"]))] = (
            int(data["scheduled_sequence"]),
            str(data["command_id"]),
        )
    elif kind == "workflow.timer_started":
        rec.sleeps_started[(workflow_id, int(data["sequence"]))] = datetime.fromisoformat(
            str(data["fire_at"])
        )
    elif kind == "workflow.timer_fired":
        rec.sleeps_fired.setdefault((workflow_id, int(data["started_sequence"])), record.timestamp)
