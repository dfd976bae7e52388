"""slotflow developer stack: one Kafka broker (KRaft) and one PostgreSQL, both on 127.0.0.1.

Run it with the repository's virtualenv (it imports aiokafka, asyncpg and slotflow):

    .venv/bin/python deploy/devstack/devstack.py up        # start (or say "already running")
    .venv/bin/python deploy/devstack/devstack.py status    # exit 0 when both run, 3 otherwise
    .venv/bin/python deploy/devstack/devstack.py down [--clean]
    eval "$(.venv/bin/python deploy/devstack/devstack.py env)"

Kafka runs from Maven Central jars (deploy/devstack/pom.xml, cached in .cache/kafka-libs-<version>/),
PostgreSQL from the Debian packages. Everything the stack writes lives in the state directory
(.devstack/, or SLOTFLOW_DEVSTACK_DIR). Progress goes to stderr; stdout carries only the `export`
lines, so `eval "$(devstack.py up)"` works.

Processes are found by pid file only (never by name). The async functions start_kafka, stop_kafka,
start_postgres and stop_postgres are the API for chaos tests (SIGKILL, SIGSTOP, `-m immediate`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import hashlib
import json
import logging
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
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

try:
    import asyncpg

    from slotflow.contracts.topics import TOPICS
    from slotflow.errors import SlotflowError
    from slotflow.kafka.admin import (
        ClusterInfo,
        KafkaUnavailable,
        describe_cluster,
        ensure_topics,
        warm_coordinators,
    )
except ImportError as _err:  # pragma: no cover - only without the virtualenv
    sys.exit(f"devstack: cannot import {_err.name}: run `make setup` first, then use .venv/bin/python")

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
POM = HERE / "pom.xml"
LOG4J2_CONFIG = HERE / "log4j2.properties"

KAFKA_READY_LINE = b"Kafka Server started"
KAFKA_TIMEOUT_S = 120.0
KAFKA_STOP_TIMEOUT_S = 30.0
PG_TIMEOUT_S = 60.0
PG_OS_USER = "postgres"
PG_ROLE = "slotflow"
PG_DATABASE = "slotflow"
PG_CONF_NAME = "slotflow-devstack.conf"
STATE_MARKER = ".slotflow-devstack"
JARS_MARKER = ".complete.json"
MVN_MISSING = (
    "mvn not found: it fetches the Kafka jars from Maven Central once. "
    "Install it with `apt-get install -y maven` (Debian package maven)"
)
EXIT_ERROR = 1
EXIT_CONFLICT = 2
EXIT_DOWN = 3

#: The APIs `describe` lists (those aiokafka uses for producing, consuming, groups and transactions).
SHOWN_APIS = frozenset(
    [
        "Produce",
        "Fetch",
        "ListOffsets",
        "Metadata",
        "OffsetCommit",
        "OffsetFetch",
        "FindCoordinator",
        "JoinGroup",
        "Heartbeat",
        "LeaveGroup",
        "SyncGroup",
        "ApiVersions",
        "CreateTopics",
        "InitProducerId",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        "TxnOffsetCommit",
        "DescribeQuorum",
    ]
)

PgStopMode = Literal["smart", "fast", "immediate"]


class DevstackError(Exception):
    """A failure with a message for the user; main() prints it and exits non-zero."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def say(message: str) -> None:
    """Progress and diagnostics go to stderr; stdout is reserved for the export lines."""
    print(f"devstack: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Configuration


def _port_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise DevstackError(f"{name}={raw!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise DevstackError(f"{name}={port} is outside 1..65535")
    return port


@dataclass(frozen=True)
class Config:
    state_dir: Path
    cache_dir: Path
    kafka_port: int
    controller_port: int
    pg_port: int

    @classmethod
    def from_env(cls) -> Config:
        state = os.environ.get("SLOTFLOW_DEVSTACK_DIR", "").strip()
        cache = os.environ.get("SLOTFLOW_DEVSTACK_CACHE", "").strip()
        cfg = cls(
            # Relative paths are taken from the repository root, wherever the command runs from.
            state_dir=(REPO_ROOT / state).resolve() if state else REPO_ROOT / ".devstack",
            cache_dir=(REPO_ROOT / cache).resolve() if cache else REPO_ROOT / ".cache",
            kafka_port=_port_from_env("SLOTFLOW_KAFKA_PORT", 19092),
            controller_port=_port_from_env("SLOTFLOW_KAFKA_CONTROLLER_PORT", 19093),
            pg_port=_port_from_env("SLOTFLOW_PG_PORT", 15432),
        )
        ports = [cfg.kafka_port, cfg.controller_port, cfg.pg_port]
        if len(set(ports)) != len(ports):
            raise DevstackError(
                "SLOTFLOW_KAFKA_PORT, SLOTFLOW_KAFKA_CONTROLLER_PORT and SLOTFLOW_PG_PORT must differ "
                f"(got {ports})"
            )
        return cfg

    # Kafka files
    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def kafka_data(self) -> Path:
        return self.kafka_dir / "data"

    @property
    def server_properties(self) -> Path:
        return self.kafka_dir / "server.properties"

    @property
    def kafka_log(self) -> Path:
        return self.state_dir / "kafka.log"

    @property
    def kafka_pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def cluster_id_file(self) -> Path:
        return self.state_dir / "cluster-id"

    # PostgreSQL files
    @property
    def pg_dir(self) -> Path:
        return self.state_dir / "pg"

    @property
    def pg_data(self) -> Path:
        return self.pg_dir / "data"

    @property
    def pg_log(self) -> Path:
        return self.state_dir / "postgres.log"

    @property
    def pg_pid_file(self) -> Path:
        return self.state_dir / "postgres.pid"

    @property
    def pg_socket_dir(self) -> Path:
        # A Unix socket path must fit in 107 bytes; a deep checkout falls back to the temp dir.
        if len(str(self.pg_data)) + len(f"/.s.PGSQL.{self.pg_port}.lock") < 100:
            return self.pg_data
        return Path(tempfile.gettempdir()) / f"slotflow-devstack-pg-{self.pg_port}"

    # Connection settings
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def dsn(self) -> str:
        return f"postgresql://{PG_ROLE}@127.0.0.1:{self.pg_port}/{PG_DATABASE}"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"

    def env_lines(self) -> str:
        return (
            f"export SLOTFLOW_KAFKA_BOOTSTRAP={shlex.quote(self.bootstrap)}\n"
            f"export SLOTFLOW_PG_DSN={shlex.quote(self.dsn)}\n"
        )


def _prepare_state_dir(cfg: Config) -> None:
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / STATE_MARKER).touch()


@contextlib.contextmanager
def _state_lock(cfg: Config) -> Iterator[None]:
    """Serialise devstack commands that change state (two `up`s at once would race)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    with (cfg.state_dir / ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another devstack command is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# --------------------------------------------------------------------------------------------------
# Processes and ports (by pid file, never by process name)

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _proc_state(pid: int) -> str | None:
    """The process state letter from /proc (R, S, T, Z, ...), or None when there is no such process."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:  # reap our own exited child
        del _CHILDREN[pid]
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    """False once the process is gone. A zombie counts as gone only when its last thread has exited
    (a SIGKILLed JVM's main thread turns Z while other threads still hold its sockets)."""
    state = _proc_state(pid)
    if state is None or state == "X":
        return False
    if state == "Z":
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _port_free(port: int) -> bool:
    """True if 127.0.0.1:port can be bound (SO_REUSEADDR, so TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_answers(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _port_owner(port: int) -> str | None:
    """Best effort: which process listens on `port` (from /proc/net/tcp and /proc/*/fd)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    command = " ".join(_cmdline(int(proc.name)))[:120]
                    return f"pid {proc.name} ({command})"
        except OSError:
            continue
    return None


def _port_conflict(port: int, env_var: str) -> str:
    owner = _port_owner(port)
    held_by = f" by {owner}" if owner else ""
    return (
        f"port 127.0.0.1:{port} is already in use{held_by}, not by this devstack; "
        f"stop that process or choose another port with {env_var}=<port>"
    )


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


async def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.1)
    return not _alive(pid)


async def _run(
    argv: Sequence[str],
    *,
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stream: bool = False,
    check: bool = True,
) -> tuple[int, str]:
    """Run a short-lived command; raise DevstackError with its output when it fails and `check`."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        # A streamed command writes to our stderr: stdout is kept for the export lines.
        stdout=sys.stderr.fileno() if stream else subprocess.PIPE,
        stderr=sys.stderr.fileno() if stream else subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,  # Ctrl-C on the terminal must not reach postmaster or the JVM
    )
    out_bytes, _ = await proc.communicate()
    output = (out_bytes or b"").decode(errors="replace")
    code = proc.returncode if proc.returncode is not None else -1
    if check and code != 0:
        raise DevstackError(f"{what} failed (exit {code}): {shlex.join(argv)}\n{output.rstrip()}")
    return code, output


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------------
# Kafka: jars, configuration, start, stop


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", POM.read_text())
    if match is None:
        raise DevstackError(f"no <kafka.version> property in {POM.relative_to(REPO_ROOT)}")
    return match.group(1)


def jars_dir(cfg: Config) -> Path:
    return cfg.cache_dir / f"kafka-libs-{kafka_version()}"


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _jars_complete(directory: Path) -> bool:
    try:
        marker = json.loads((directory / JARS_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("pom_sha256") != _pom_digest():
        return False
    jars = marker.get("jars")
    return isinstance(jars, list) and bool(jars) and all((directory / str(j)).is_file() for j in jars)


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise DevstackError(
            "java not found: Kafka 4.x needs Java 17+. Install it with "
            "`apt-get install -y openjdk-17-jre-headless` (Debian package openjdk-17-jre-headless)"
        )
    return java


_JAVA_CHECKED: set[str] = set()


async def _check_java(java: str) -> None:
    if java in _JAVA_CHECKED:
        return
    _, output = await _run([java, "-version"], what="java -version")
    match = re.search(r'version "(\d+)(?:\.(\d+))?', output)
    if match is None:
        return
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise DevstackError(
            f"{java} is Java {major}; Kafka 4.x brokers need Java 17+ "
            "(`apt-get install -y openjdk-17-jre-headless`, or set JAVA_HOME)"
        )
    _JAVA_CHECKED.add(java)


async def ensure_jars(cfg: Config) -> Path:
    """The Kafka runtime jars, fetched with mvn once and then taken from the cache folder."""
    target = jars_dir(cfg)
    if _jars_complete(target):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevstackError(MVN_MISSING)
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    say(f"fetching Kafka {kafka_version()} jars with mvn into {_show(target)} (once)")
    started = time.monotonic()
    argv = [mvn, "-B", "-q", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
    try:
        await _run(argv, what="mvn dependency:copy-dependencies")
        jars = sorted(p.name for p in staging.glob("*.jar"))
        if not any(j.startswith("kafka_2.13-") for j in jars):
            raise DevstackError(f"mvn finished but {staging} holds no kafka_2.13 jar")
        (staging / JARS_MARKER).write_text(
            json.dumps({"pom_sha256": _pom_digest(), "jars": jars}, indent=1) + "\n"
        )
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"fetched {len(jars)} jars in {time.monotonic() - started:.1f} s")
    return target


def _server_properties(cfg: Config) -> str:
    return f"""\
# Generated by deploy/devstack/devstack.py at every Kafka start; change the script, not this file.
# One node in KRaft combined mode (broker and controller), static voters, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cfg.controller_port}
listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={cfg.kafka_data}

# A single broker: every internal topic must live with one replica, or the first consumer group
# (__consumer_offsets) and the first transaction (__transaction_state) wait forever.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# One partition each instead of 50: the first group join and the first transaction start faster.
offsets.topic.num.partitions=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.num.partitions=1

# Tests create many consumer groups; the default 3 s wait before a new group's first rebalance
# would add 3 s to every one of them.
group.initial.rebalance.delay.ms=0

# After a SIGKILL (chaos tests) the restarted broker cannot register until the controller expires
# its previous session: 4 s instead of the default 9 s. Heartbeats are local, so this is safe here.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000

# slotflow creates its topics explicitly (slotflow.kafka.admin.ensure_topics); a misspelt topic
# name must fail instead of silently creating a new topic.
auto.create.topics.enable=false

# Small machine: fewer threads, a 32 MiB log-cleaner buffer (the cleaner stays on for compaction).
num.network.threads=2
num.io.threads=4
log.cleaner.dedupe.buffer.size=33554432
"""


def _listener_ports(properties: Path) -> tuple[int, int] | None:
    """(broker, controller) ports from a server.properties this script wrote."""
    try:
        text = properties.read_text()
    except OSError:
        return None
    broker = re.search(
        r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)", text, re.M
    )
    return (int(broker.group(1)), int(broker.group(2))) if broker else None


def _meta_cluster_id(cfg: Config) -> str | None:
    try:
        text = (cfg.kafka_data / "meta.properties").read_text()
    except OSError:
        return None
    match = re.search(r"^cluster\.id=(\S+)", text, re.M)
    return match.group(1) if match else None


def cluster_id(cfg: Config) -> str:
    """The fixed cluster id in .devstack/cluster-id; a formatted data dir's own id wins."""
    formatted = _meta_cluster_id(cfg)
    stored = cfg.cluster_id_file.read_text().strip() if cfg.cluster_id_file.exists() else None
    if formatted and formatted != stored:
        if stored:
            say(f"Kafka data dir was formatted with cluster id {formatted}; keeping it (was {stored})")
        cfg.cluster_id_file.write_text(formatted + "\n")
        return formatted
    if stored:
        return stored
    new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    cfg.cluster_id_file.write_text(new_id + "\n")
    return new_id


def kafka_pid(cfg: Config | None = None) -> int | None:
    """The pid of this devstack's broker if it is alive (a zombie counts as dead)."""
    cfg = cfg or Config.from_env()
    pid = _read_pid(cfg.kafka_pid_file)
    if pid is None or not _alive(pid):
        return None
    cmdline = _cmdline(pid)
    if "kafka.Kafka" not in cmdline or str(cfg.server_properties) not in cmdline:
        return None  # the pid was reused by an unrelated process
    return pid


def _kafka_command(cfg: Config, java: str, jars: Path) -> list[str]:
    return [
        java,
        "-Xms256m",
        "-Xmx768m",
        # GC and JIT flags of Kafka's bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS)
        "-server",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        "-XX:MaxInlineLevel=15",
        "-Djava.awt.headless=true",
        # Die on OOM rather than limp on: a dead broker is obvious, a half-dead one is not.
        "-XX:+ExitOnOutOfMemoryError",
        f"-Xlog:gc*:file={cfg.state_dir / 'kafka-gc.log'}:time,tags:filecount=2,filesize=20M",
        f"-Dkafka.logs.dir={cfg.state_dir}",
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        "-cp",
        f"{jars}/*",
        "kafka.Kafka",
        str(cfg.server_properties),
    ]


def _spawn_kafka(cfg: Config, argv: list[str]) -> int:
    if cfg.kafka_log.exists():
        cfg.kafka_log.replace(cfg.kafka_log.with_name("kafka.log.1"))
    with cfg.kafka_log.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cfg.kafka_dir,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    cfg.kafka_pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


async def _wait_kafka_log(cfg: Config, pid: int, deadline: float) -> None:
    seen = b""
    while time.monotonic() < deadline:
        seen += _read_from(cfg.kafka_log, len(seen))
        if KAFKA_READY_LINE in seen:
            return
        if not _alive(pid):
            raise DevstackError(
                f"Kafka (pid {pid}) exited during start-up; last lines of {_show(cfg.kafka_log)}:\n"
                + _tail(cfg.kafka_log)
            )
        await asyncio.sleep(0.1)
    raise DevstackError(
        f"Kafka did not log {KAFKA_READY_LINE.decode()!r} within {KAFKA_TIMEOUT_S:.0f} s; "
        f"see {_show(cfg.kafka_log)}:\n" + _tail(cfg.kafka_log)
    )


async def wait_kafka_ready(cfg: Config, deadline: float) -> ClusterInfo:
    """A protocol-level check: metadata and ApiVersions answered by the broker."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await asyncio.wait_for(
                describe_cluster(cfg.bootstrap), max(deadline - time.monotonic(), 0.1)
            )
        except (KafkaUnavailable, TimeoutError) as err:
            last = err
        await asyncio.sleep(0.3)
    raise DevstackError(f"Kafka at {cfg.bootstrap} did not answer within the timeout: {last}")


async def start_kafka(cfg: Config | None = None, *, timeout: float = KAFKA_TIMEOUT_S) -> int:
    """Start the broker unless it runs; wait until it answers; return its pid."""
    cfg = cfg or Config.from_env()
    _prepare_state_dir(cfg)
    deadline = time.monotonic() + timeout
    pid = kafka_pid(cfg)
    if pid is not None:
        if _proc_state(pid) == "T":
            raise DevstackError(f"Kafka (pid {pid}) is stopped (SIGSTOP); send SIGCONT or restart-kafka")
        running_ports = _listener_ports(cfg.server_properties)
        if running_ports and running_ports != (cfg.kafka_port, cfg.controller_port):
            raise DevstackError(
                f"Kafka (pid {pid}) runs on ports {running_ports[0]}/{running_ports[1]}, not "
                f"{cfg.kafka_port}/{cfg.controller_port}; run `down` first to change "
                "SLOTFLOW_KAFKA_PORT / SLOTFLOW_KAFKA_CONTROLLER_PORT"
            )
        await wait_kafka_ready(cfg, deadline)
        return pid

    conflicts = [
        _port_conflict(port, var)
        for port, var in (
            (cfg.kafka_port, "SLOTFLOW_KAFKA_PORT"),
            (cfg.controller_port, "SLOTFLOW_KAFKA_CONTROLLER_PORT"),
        )
        if not _port_free(port)
    ]
    if conflicts:
        raise DevstackError("\n".join(conflicts), EXIT_CONFLICT)

    java = _find_java()
    await _check_java(java)
    jars = await ensure_jars(cfg)
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    cfg.server_properties.write_text(_server_properties(cfg))
    cid = cluster_id(cfg)
    if not (cfg.kafka_data / "meta.properties").exists():
        say(f"formatting Kafka storage (cluster id {cid})")
        await _run(
            [
                java,
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
                "-cp",
                f"{jars}/*",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cid,
                "-c",
                str(cfg.server_properties),
                "--ignore-formatted",
            ],
            what="kafka-storage format",
        )
    pid = _spawn_kafka(cfg, _kafka_command(cfg, java, jars))
    say(f"Kafka {kafka_version()} starting (pid {pid}, log {_show(cfg.kafka_log)})")
    await _wait_kafka_log(cfg, pid, deadline)
    await wait_kafka_ready(cfg, deadline)
    return pid


async def stop_kafka(
    kill: bool = False, cfg: Config | None = None, *, timeout: float = KAFKA_STOP_TIMEOUT_S
) -> bool:
    """SIGTERM the broker (controlled shutdown), SIGKILL after `timeout`; `kill` SIGKILLs at once.

    Returns False when it was not running.
    """
    cfg = cfg or Config.from_env()
    pid = kafka_pid(cfg)
    if pid is None:
        cfg.kafka_pid_file.unlink(missing_ok=True)
        return False
    if kill:
        _signal(pid, signal.SIGKILL)
    else:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # a SIGSTOPped broker handles SIGTERM only once it runs again
        if not await _wait_gone(pid, timeout):
            say(f"Kafka (pid {pid}) still runs after {timeout:.0f} s; sending SIGKILL")
            _signal(pid, signal.SIGKILL)
    if not await _wait_gone(pid, 10.0):
        raise DevstackError(f"Kafka (pid {pid}) survived SIGKILL")
    cfg.kafka_pid_file.unlink(missing_ok=True)
    await _wait_ports_free((cfg.kafka_port, cfg.controller_port), 10.0)
    return True


async def _wait_ports_free(ports: Sequence[int], timeout: float) -> None:
    """After a stop, give the kernel a moment to release the listening sockets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_port_free(p) for p in ports):
            return
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------------------------------
# PostgreSQL: binaries, initdb, start, stop


def _pg_bin_candidates() -> list[Path]:
    found: list[Path] = []
    for tool in ("pg_ctl", "initdb"):
        located = shutil.which(tool)
        if located:
            found.append(Path(located).resolve().parent)

    def version_key(path: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", path.parent.name)) or (0,)

    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version_key, reverse=True)
    return found + debian


def find_pg_bin() -> Path | None:
    for directory in _pg_bin_candidates():
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


async def ensure_pg_bin() -> Path:
    found = find_pg_bin()
    if found is not None:
        return found
    if os.geteuid() != 0:
        raise DevstackError(
            "PostgreSQL server binaries (initdb, pg_ctl) not found; install the Debian package: "
            "`sudo apt-get update && sudo apt-get install -y postgresql`"
        )
    say("PostgreSQL not found; installing the Debian package postgresql (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    await _run(["apt-get", "update"], what="apt-get update", env=env, stream=True)
    await _run(
        ["apt-get", "install", "-y", "postgresql"], what="apt-get install postgresql", env=env, stream=True
    )
    found = find_pg_bin()
    if found is None:
        raise DevstackError("apt-get installed postgresql, but initdb/pg_ctl are still not found")
    return found


def _as_pg_user(argv: Sequence[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres OS user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_OS_USER, "--", *argv]
    return list(argv)


def _chown_pg(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, PG_OS_USER, PG_OS_USER)


def postgres_pid(cfg: Config | None = None) -> int | None:
    """The postmaster's pid from its own postmaster.pid, if that process is alive."""
    cfg = cfg or Config.from_env()
    pid = _read_pid(cfg.pg_data / "postmaster.pid")
    if pid is None or not _alive(pid):
        return None
    if str(cfg.pg_data) not in " ".join(_cmdline(pid)):
        return None  # a stale postmaster.pid whose pid now belongs to something else
    return pid


def _postgres_running_port(cfg: Config) -> int | None:
    try:
        lines = (cfg.pg_data / "postmaster.pid").read_text().splitlines()
        return int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def _pg_conf(cfg: Config) -> str:
    return f"""\
# Written by deploy/devstack/devstack.py at every start; included from postgresql.conf.
listen_addresses = '127.0.0.1'
port = {cfg.pg_port}
unix_socket_directories = '{cfg.pg_socket_dir}'
# Light tuning for test suites: many pools at once. fsync and synchronous_commit keep their
# defaults, so crash tests (pg_ctl stop -m immediate) see real durability.
max_connections = 200
shared_buffers = 256MB
"""


async def _initdb(cfg: Config, bindir: Path) -> None:
    cfg.pg_dir.mkdir(parents=True, exist_ok=True)
    cfg.pg_data.mkdir(mode=0o700, exist_ok=True)
    _chown_pg(cfg.pg_dir)
    _chown_pg(cfg.pg_data)
    if os.geteuid() == 0:
        code, _ = await _run(
            ["runuser", "-u", PG_OS_USER, "--", "test", "-w", str(cfg.pg_data)],
            what="access check",
            check=False,
        )
        if code != 0:
            raise DevstackError(
                f"the {PG_OS_USER} OS user cannot write {cfg.pg_data} (a parent directory is not "
                "world-traversable); set SLOTFLOW_DEVSTACK_DIR to a directory it can reach"
            )
    say(f"initdb {_show(cfg.pg_data)}")
    await _run(
        _as_pg_user(
            [
                str(bindir / "initdb"),
                "-D",
                str(cfg.pg_data),
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C",
                # trust, but only on loopback: the server listens on 127.0.0.1 and its own socket only
                "--auth-local=trust",
                "--auth-host=trust",
            ]
        ),
        what="initdb",
        cwd=cfg.pg_dir,
    )
    with (cfg.pg_data / "postgresql.conf").open("a") as conf:
        conf.write(f"\n# slotflow devstack settings\ninclude_if_exists = '{PG_CONF_NAME}'\n")


def _pg_data_major(cfg: Config) -> int | None:
    try:
        return int((cfg.pg_data / "PG_VERSION").read_text().strip().split(".")[0])
    except (OSError, ValueError):
        return None


async def _pg_bin_major(bindir: Path) -> int:
    _, out = await _run([str(bindir / "pg_ctl"), "--version"], what="pg_ctl --version")
    match = re.search(r"(\d+)", out)
    return int(match.group(1)) if match else 0


async def _pg_connect(dsn: str, deadline: float) -> asyncpg.Connection:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return await asyncpg.connect(dsn, timeout=max(min(deadline - time.monotonic(), 5.0), 0.1))
        except (OSError, asyncpg.PostgresError, TimeoutError) as err:
            last = err
        await asyncio.sleep(0.2)
    raise DevstackError(f"PostgreSQL did not accept connections ({dsn}): {last!r}")


async def _pg_bootstrap(cfg: Config, deadline: float) -> None:
    """Create the superuser role `slotflow` (tests CREATE DATABASE) and its database, then SELECT 1."""
    admin = await _pg_connect(f"postgresql://postgres@127.0.0.1:{cfg.pg_port}/postgres", deadline)
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", PG_ROLE):
            await admin.execute(f"CREATE ROLE {PG_ROLE} LOGIN SUPERUSER")
            say(f"created role {PG_ROLE}")
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", PG_DATABASE):
            await admin.execute(f"CREATE DATABASE {PG_DATABASE} OWNER {PG_ROLE}")
            say(f"created database {PG_DATABASE}")
    finally:
        await admin.close()
    conn = await _pg_connect(cfg.dsn, deadline)
    try:
        if await conn.fetchval("SELECT 1") != 1:
            raise DevstackError("PostgreSQL answered SELECT 1 with something else")
    finally:
        await conn.close()


async def start_postgres(cfg: Config | None = None, *, timeout: float = PG_TIMEOUT_S) -> int:
    """initdb if needed, start PostgreSQL unless it runs, create role and database; return the pid."""
    cfg = cfg or Config.from_env()
    _prepare_state_dir(cfg)
    deadline = time.monotonic() + timeout
    pid = postgres_pid(cfg)
    if pid is not None:
        if _proc_state(pid) == "T":
            raise DevstackError(
                f"PostgreSQL (pid {pid}) is stopped (SIGSTOP); send SIGCONT or restart-postgres"
            )
        running = _postgres_running_port(cfg)
        if running is not None and running != cfg.pg_port:
            raise DevstackError(
                f"PostgreSQL (pid {pid}) runs on port {running}, not {cfg.pg_port}; "
                "run `down` first to change SLOTFLOW_PG_PORT"
            )
        await _pg_bootstrap(cfg, deadline)
        return pid

    if not _port_free(cfg.pg_port):
        raise DevstackError(_port_conflict(cfg.pg_port, "SLOTFLOW_PG_PORT"), EXIT_CONFLICT)
    bindir = await ensure_pg_bin()
    data_major = _pg_data_major(cfg)
    if data_major is None:
        await _initdb(cfg, bindir)
    else:
        bin_major = await _pg_bin_major(bindir)
        if bin_major and bin_major != data_major:
            raise DevstackError(
                f"{_show(cfg.pg_data)} was created by PostgreSQL {data_major}, but the binaries in "
                f"{bindir} are {bin_major}; run `down --clean` to start over"
            )
    conf = cfg.pg_data / PG_CONF_NAME
    conf.write_text(_pg_conf(cfg))
    _chown_pg(conf)
    socket_dir = cfg.pg_socket_dir
    if socket_dir != cfg.pg_data:
        socket_dir.mkdir(mode=0o700, exist_ok=True)
        _chown_pg(socket_dir)
    cfg.pg_log.touch()
    _chown_pg(cfg.pg_log)
    options = f"-c listen_addresses=127.0.0.1 -p {cfg.pg_port} -k {shlex.quote(str(socket_dir))}"
    say(f"PostgreSQL starting on 127.0.0.1:{cfg.pg_port} (log {_show(cfg.pg_log)})")
    code, output = await _run(
        _as_pg_user(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(cfg.pg_data),
                "-o",
                options,
                "-l",
                str(cfg.pg_log),
                "-w",
                "-t",
                str(max(int(deadline - time.monotonic()), 5)),
                "start",
            ]
        ),
        what="pg_ctl start",
        cwd=cfg.pg_dir,
        check=False,
    )
    if code != 0:
        raise DevstackError(f"pg_ctl start failed (exit {code}):\n{output.rstrip()}\n{_tail(cfg.pg_log)}")
    pid = postgres_pid(cfg)
    if pid is None:
        raise DevstackError(f"pg_ctl reported success but no postmaster runs; see {_show(cfg.pg_log)}")
    cfg.pg_pid_file.write_text(f"{pid}\n")
    await _pg_bootstrap(cfg, deadline)
    return pid


async def stop_postgres(mode: PgStopMode = "fast", cfg: Config | None = None) -> bool:
    """`pg_ctl stop -m <mode>`; "immediate" is a crash (recovery at the next start).

    Returns False when it was not running.
    """
    cfg = cfg or Config.from_env()
    pid = postgres_pid(cfg)
    if pid is None:
        cfg.pg_pid_file.unlink(missing_ok=True)
        return False
    _signal(pid, signal.SIGCONT)  # a SIGSTOPped postmaster cannot shut down
    bindir = find_pg_bin()
    if bindir is not None:
        code, output = await _run(
            _as_pg_user(
                [str(bindir / "pg_ctl"), "-D", str(cfg.pg_data), "-m", mode, "-w", "-t", "60", "stop"]
            ),
            what="pg_ctl stop",
            cwd=cfg.pg_dir,
            check=False,
        )
        if code != 0 and _alive(pid):
            say(f"pg_ctl stop failed (exit {code}): {output.strip()}")
    else:  # the same signals pg_ctl sends
        _signal(pid, {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode])
    if not await _wait_gone(pid, 60.0):
        say(f"PostgreSQL (pid {pid}) still runs; sending SIGKILL")
        _signal(pid, signal.SIGKILL)
        await _wait_gone(pid, 10.0)
    cfg.pg_pid_file.unlink(missing_ok=True)
    await _wait_ports_free((cfg.pg_port,), 10.0)
    return True


# --------------------------------------------------------------------------------------------------
# Commands


def _show(path: Path) -> str:
    """A path relative to the repository when it is inside it (for messages)."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _write_env(cfg: Config) -> None:
    cfg.env_file.write_text(cfg.env_lines())


def _print_env(cfg: Config) -> None:
    sys.stdout.write(cfg.env_lines())
    sys.stdout.flush()


async def cmd_up(cfg: Config) -> int:
    started = time.monotonic()
    _prepare_state_dir(cfg)
    k_pid, p_pid = kafka_pid(cfg), postgres_pid(cfg)
    if (
        k_pid is not None
        and p_pid is not None
        and _listener_ports(cfg.server_properties) == (cfg.kafka_port, cfg.controller_port)
        and _postgres_running_port(cfg) == cfg.pg_port
        and _proc_state(k_pid) != "T"
        and _proc_state(p_pid) != "T"
        and _port_answers(cfg.kafka_port)
        and _port_answers(cfg.pg_port)
    ):
        say(f"already running (Kafka pid {k_pid}, PostgreSQL pid {p_pid}); `status` for details")
        _write_env(cfg)
        _print_env(cfg)
        return 0

    # Refuse early, before anything starts, when a port belongs to someone else.
    conflicts: list[str] = []
    if k_pid is None:
        for port, var in (
            (cfg.kafka_port, "SLOTFLOW_KAFKA_PORT"),
            (cfg.controller_port, "SLOTFLOW_KAFKA_CONTROLLER_PORT"),
        ):
            if not _port_free(port):
                conflicts.append(_port_conflict(port, var))
    if p_pid is None and not _port_free(cfg.pg_port):
        conflicts.append(_port_conflict(cfg.pg_port, "SLOTFLOW_PG_PORT"))
    if conflicts:
        raise DevstackError("\n".join(conflicts), EXIT_CONFLICT)
    # Missing tools fail here too, before either server starts.
    if k_pid is None:
        await _check_java(_find_java())
        if not _jars_complete(jars_dir(cfg)) and shutil.which("mvn") is None:
            raise DevstackError(MVN_MISSING)
    if p_pid is None:
        await ensure_pg_bin()

    results = await asyncio.gather(start_kafka(cfg), start_postgres(cfg), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    for err in errors:
        if not isinstance(err, Exception):
            raise err
    if errors:
        codes = [e.exit_code for e in errors if isinstance(e, DevstackError)]
        messages = "\n".join(str(e) if isinstance(e, DevstackError) else repr(e) for e in errors)
        raise DevstackError(
            messages + "\n(what did start keeps running; `down` stops it)", max(codes or [EXIT_ERROR])
        )
    k_pid, p_pid = (int(r) for r in results if isinstance(r, int))

    try:
        created = await ensure_topics(cfg.bootstrap, TOPICS)
        # __consumer_offsets and __transaction_state now, so the first test's group join does not wait.
        await warm_coordinators(cfg.bootstrap)
    except SlotflowError as err:
        raise DevstackError(f"Kafka runs, but setting it up failed: {err}") from err
    if created:
        say(f"created {len(created)} topics: {', '.join(created)}")
    else:
        say(f"all {len(TOPICS)} topics present")
    _write_env(cfg)
    say(
        f"ready in {time.monotonic() - started:.1f} s: Kafka {cfg.bootstrap} (pid {k_pid}), "
        f"PostgreSQL 127.0.0.1:{cfg.pg_port} (pid {p_pid}); env in {_show(cfg.env_file)}"
    )
    _print_env(cfg)
    return 0


async def cmd_down(cfg: Config, clean: bool) -> int:
    if not cfg.state_dir.exists():
        say("not running (no state directory)")
        return 0
    stopped_kafka = await stop_kafka(False, cfg)
    stopped_pg = await stop_postgres("fast", cfg)
    if stopped_kafka:
        say("Kafka stopped")
    if stopped_pg:
        say("PostgreSQL stopped")
    if not (stopped_kafka or stopped_pg):
        say("nothing was running")
    if clean:
        if not (cfg.state_dir / STATE_MARKER).exists() and any(cfg.state_dir.iterdir()):
            raise DevstackError(f"{cfg.state_dir} has no {STATE_MARKER} marker; refusing to delete it")
        shutil.rmtree(cfg.state_dir)
        say(f"deleted {_show(cfg.state_dir)} (all Kafka and PostgreSQL data)")
    return 0


def cmd_status(cfg: Config) -> int:
    k_pid, p_pid = kafka_pid(cfg), postgres_pid(cfg)
    rows = []
    all_up = True
    for name, pid, port, extra, env_var in (
        ("kafka", k_pid, cfg.kafka_port, f" (controller {cfg.controller_port})", "SLOTFLOW_KAFKA_PORT"),
        ("postgres", p_pid, cfg.pg_port, "", "SLOTFLOW_PG_PORT"),
    ):
        answers = _port_answers(port)
        if pid is not None and _proc_state(pid) == "T":
            state = "stopped (SIGSTOP; the kernel still accepts connections)"
            all_up = False
        elif pid is not None and answers:
            state = "up"
        elif pid is not None:
            state = "starting or hung (port not answering)"
            all_up = False
        else:
            state = "down" + (f"; port {port} is held by another process (set {env_var})" if answers else "")
            all_up = False
        pid_text = f"pid {pid}" if pid is not None else "no pid"
        rows.append(f"{name:<9} {state:<5} {pid_text:<11} 127.0.0.1:{port}{extra}")
    print("\n".join(rows))
    print(f"state dir {_show(cfg.state_dir)}")
    return 0 if all_up else EXIT_DOWN


async def cmd_describe(cfg: Config) -> int:
    try:
        info = await asyncio.wait_for(describe_cluster(cfg.bootstrap), 15)
    except (KafkaUnavailable, TimeoutError) as err:
        raise DevstackError(f"Kafka at {cfg.bootstrap} does not answer: {err}", EXIT_DOWN) from err
    print(f"cluster id     {info.cluster_id}")
    print(f"controller id  {info.controller_id}")
    print(f"broker ids     {', '.join(map(str, info.broker_ids))}")
    shown = [a for a in info.api_versions if a.name in SHOWN_APIS]
    print(
        f"api versions   {len(info.api_versions)} APIs; "
        + ", ".join(f"{a.name} {a.min_version}-{a.max_version}" for a in shown)
    )
    print("topics")
    missing = 0
    for spec in TOPICS:
        actual = info.topic_partitions.get(spec.name)
        if actual is None:
            missing += 1
            note = "MISSING"
        elif actual != spec.partitions:
            note = f"{actual} partitions (TOPICS says {spec.partitions})"
        else:
            note = f"{actual} partitions"
        print(f"  {spec.name:<34} {note}")
    others = sorted(set(info.topic_partitions) - {s.name for s in TOPICS})
    if others:
        more = f", ... ({len(others) - 5} more)" if len(others) > 5 else ""
        print(f"  {len(others)} other topics: {', '.join(others[:5])}{more}")
    return 0 if missing == 0 else EXIT_DOWN


def cmd_pid(pid: int | None) -> int:
    if pid is None:
        return EXIT_DOWN
    print(pid)
    return 0


def cmd_pg_ctl(cfg: Config, args: list[str]) -> int:
    bindir = find_pg_bin()
    if bindir is None:
        raise DevstackError("pg_ctl not found; run `up` first (it installs PostgreSQL if needed)")
    argv = _as_pg_user([str(bindir / "pg_ctl"), "-D", str(cfg.pg_data), *args])
    return subprocess.call(argv, cwd=cfg.pg_dir if cfg.pg_dir.exists() else None)


async def cmd_restart_kafka(cfg: Config, kill: bool) -> int:
    await stop_kafka(kill, cfg)
    pid = await start_kafka(cfg)
    say(f"Kafka restarted (pid {pid})")
    return 0


async def cmd_restart_postgres(cfg: Config, immediate: bool) -> int:
    await stop_postgres("immediate" if immediate else "fast", cfg)
    pid = await start_postgres(cfg)
    say(f"PostgreSQL restarted (pid {pid})")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devstack.py",
        description="slotflow developer stack: Kafka (KRaft, one node) and PostgreSQL on 127.0.0.1.",
        epilog="Environment: SLOTFLOW_DEVSTACK_DIR, SLOTFLOW_KAFKA_PORT, SLOTFLOW_KAFKA_CONTROLLER_PORT, "
        "SLOTFLOW_PG_PORT, SLOTFLOW_DEVSTACK_CACHE. See deploy/devstack/README.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("up", help="start Kafka and PostgreSQL, create topics, print the env")
    down = sub.add_parser("down", help="stop what `up` started")
    down.add_argument("--clean", action="store_true", help="also delete the state dir (all data)")
    sub.add_parser("status", help="show what runs; exit 0 if both are up, 3 otherwise")
    sub.add_parser("env", help="print the export lines")
    sub.add_parser("describe", help="cluster id, API versions and topics, as the broker reports them")
    sub.add_parser("kafka-pid", help="print the broker's pid (exit 3 if it does not run)")
    sub.add_parser("pg-pid", help="print the postmaster's pid (exit 3 if it does not run)")
    sub.add_parser("pg-ctl", help="run pg_ctl -D <data dir> ARGS... as the right OS user", add_help=False)
    restart_kafka = sub.add_parser("restart-kafka", help="stop and start the broker")
    restart_kafka.add_argument("--kill", action="store_true", help="SIGKILL instead of a controlled shutdown")
    restart_pg = sub.add_parser("restart-postgres", help="stop and start PostgreSQL")
    restart_pg.add_argument("--immediate", action="store_true", help="pg_ctl stop -m immediate (a crash)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Readiness probes fail on purpose while the broker starts; aiokafka would log each attempt.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        cfg = Config.from_env()
        if args_list[:1] == ["pg-ctl"]:
            return cmd_pg_ctl(cfg, args_list[1:])
        args = _parser().parse_args(args_list)
        command: str = args.command
        if command == "env":
            _print_env(cfg)
            return 0
        if command == "status":
            return cmd_status(cfg)
        if command == "describe":
            return asyncio.run(cmd_describe(cfg))
        if command == "kafka-pid":
            return cmd_pid(kafka_pid(cfg))
        if command == "pg-pid":
            return cmd_pid(postgres_pid(cfg))
        if command == "down" and not cfg.state_dir.exists():
            say("not running (no state directory)")
            return 0
        with _state_lock(cfg):
            if command == "up":
                return asyncio.run(cmd_up(cfg))
            if command == "down":
                return asyncio.run(cmd_down(cfg, bool(args.clean)))
            if command == "restart-kafka":
                return asyncio.run(cmd_restart_kafka(cfg, bool(args.kill)))
            if command == "restart-postgres":
                return asyncio.run(cmd_restart_postgres(cfg, bool(args.immediate)))
        raise DevstackError(f"unknown command {command}")
    except DevstackError as err:
        for line in str(err).splitlines():
            say(line)
        return err.exit_code
    except BrokenPipeError:  # e.g. `devstack.py describe | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        say("interrupted; what started keeps running (`down` stops it)")
        return 130


if __name__ == "__main__":
    sys.exit(main())
