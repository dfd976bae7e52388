"""Kafka for the devstack: jars from Maven Central, server.properties, storage format, start, stop.

One node in KRaft combined mode, run as `java -cp <jars>/* kafka.Kafka server.properties` from
the jars deploy/devstack/pom.xml names (fetched once with mvn into the cache dir).
start_kafka and stop_kafka are also the API chaos tests use (through devstack.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import time
import uuid
from pathlib import Path

import _kafka_cluster
from _config import EXIT_CONFLICT, HERE, REPO_ROOT, Config, DevstackError, prepare_state_dir, say, show
from _processes import (
    alive,
    port_conflict,
    port_free,
    proc_cmdline,
    proc_state,
    read_from,
    read_pid,
    run_command,
    send_signal,
    spawn,
    tail,
    wait_gone,
    wait_ports_free,
)

from slotflow.kafka.admin import ClusterInfo, KafkaUnavailable, describe_cluster

POM = HERE / "pom.xml"
LOG4J2_CONFIG = HERE / "log4j2.properties"

KAFKA_READY_LINE = b"Kafka Server started"
KAFKA_TIMEOUT_S = 120.0
KAFKA_STOP_TIMEOUT_S = 30.0


class KafkaStartTimeout(DevstackError):
    """The broker was still starting (alive, not yet answering) when the deadline passed."""


JARS_MARKER = ".complete.json"
MVN_MISSING = (
    "mvn not found: it fetches the Kafka jars from Maven Central once. "
    "Install it with `apt-get install -y maven` (Debian package maven)"
)


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", POM.read_text())
    if match is None:
        raise DevstackError(f"no <kafka.version> property in {POM.relative_to(REPO_ROOT)}")
    return match.group(1)


def jars_dir(cfg: Config) -> Path:
    return cfg.cache_dir / f"kafka-libs-{kafka_version()}"


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def jars_complete(directory: Path) -> bool:
    try:
        marker = json.loads((directory / JARS_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("pom_sha256") != _pom_digest():
        return False
    jars = marker.get("jars")
    return isinstance(jars, list) and bool(jars) and all((directory / str(j)).is_file() for j in jars)


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise DevstackError(
            "java not found: Kafka 4.x needs Java 17+. Install it with "
            "`apt-get install -y openjdk-17-jre-headless` (Debian package openjdk-17-jre-headless)"
        )
    return java


_JAVA_CHECKED: set[str] = set()


async def check_java(java: str) -> None:
    if java in _JAVA_CHECKED:
        return
    _, output = await run_command([java, "-version"], what="java -version")
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
    if jars_complete(target):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevstackError(MVN_MISSING)
    cfg.cache_dir.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    say(f"fetching Kafka {kafka_version()} jars with mvn into {show(target)} (once)")
    started = time.monotonic()
    argv = [mvn, "-B", "-q", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
    try:
        await run_command(argv, what="mvn dependency:copy-dependencies")
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
    # SLOTFLOW_KAFKA_EXTRA_LISTENERS (the system fault suite's proxies) follow the devstack's own.
    extra = cfg.extra_listeners
    listeners = "".join(f",{x.name}://127.0.0.1:{x.port}" for x in extra)
    advertised = "".join(f",{x.name}://127.0.0.1:{x.advertised_port}" for x in extra)
    protocols = "".join(f",{x.name}:PLAINTEXT" for x in extra)
    return f"""\
# Generated by deploy/devstack/_kafka.py at every Kafka start; change the script, not this file.
# One node in KRaft combined mode (broker and controller), static voters, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cfg.controller_port}
listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}{listeners}
advertised.listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port}{advertised}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT{protocols}
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


def listener_ports(properties: Path) -> tuple[int, int] | None:
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
    if stored and not stored.startswith("-"):
        return stored
    new_id = new_cluster_id()
    cfg.cluster_id_file.write_text(new_id + "\n")
    return new_id


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (22 url-safe base64 characters), never starting
    with `-`: `StorageTool format -t -x...` reads such an id as an option and refuses to start (one
    id in 64 did; Kafka's own `Uuid.randomUuid` skips them for the same reason)."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def kafka_pid(cfg: Config | None = None) -> int | None:
    """The pid of this devstack's broker if it is alive (a zombie counts as dead)."""
    cfg = cfg or Config.from_env()
    if cfg.brokers > 1:
        # Node 1 stands for the cluster here; `kafka_pids` gives every node's.
        return _kafka_cluster.node_pid(cfg, cfg.kafka_nodes[0])
    pid = read_pid(cfg.kafka_pid_file)
    if pid is None or not alive(pid):
        return None
    cmdline = proc_cmdline(pid)
    if "kafka.Kafka" not in cmdline or str(cfg.server_properties) not in cmdline:
        return None  # the pid was reused by an unrelated process
    return pid


def kafka_pids(cfg: Config) -> dict[str, int | None]:
    """Every broker's pid by name ("kafka", or "kafka-1".."kafka-3" in the 3-broker mode)."""
    if cfg.brokers == 1:
        return {"kafka": kafka_pid(cfg)}
    return {node.name: _kafka_cluster.node_pid(cfg, node) for node in cfg.kafka_nodes}


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
    pid = spawn(argv, log=cfg.kafka_log, cwd=cfg.kafka_dir)
    cfg.kafka_pid_file.write_text(f"{pid}\n")
    return pid


async def _wait_kafka_log(cfg: Config, pid: int, deadline: float) -> None:
    seen = b""
    while time.monotonic() < deadline:
        seen += read_from(cfg.kafka_log, len(seen))
        if KAFKA_READY_LINE in seen:
            return
        if not alive(pid):
            raise DevstackError(
                f"Kafka (pid {pid}) exited during start-up; last lines of {show(cfg.kafka_log)}:\n"
                + tail(cfg.kafka_log)
            )
        await asyncio.sleep(0.1)
    raise KafkaStartTimeout(
        f"Kafka did not log {KAFKA_READY_LINE.decode()!r} in time; "
        f"see {show(cfg.kafka_log)}:\n" + tail(cfg.kafka_log)
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
    raise KafkaStartTimeout(f"Kafka at {cfg.bootstrap} did not answer within the timeout: {last}")


async def start_kafka(cfg: Config | None = None, *, timeout: float = KAFKA_TIMEOUT_S) -> int:
    """Start the broker unless it runs; wait until it answers; return its pid."""
    cfg = cfg or Config.from_env()
    if cfg.brokers > 1:
        pids = await _kafka_cluster.start_nodes(cfg, list(cfg.kafka_nodes), timeout)
        return pids[cfg.kafka_nodes[0].node_id]
    prepare_state_dir(cfg)
    pid = kafka_pid(cfg)
    if pid is not None:
        deadline = time.monotonic() + timeout
        if proc_state(pid) == "T":
            raise DevstackError(f"Kafka (pid {pid}) is stopped (SIGSTOP); send SIGCONT or restart-kafka")
        running_ports = listener_ports(cfg.server_properties)
        if running_ports and running_ports != (cfg.kafka_port, cfg.controller_port):
            raise DevstackError(
                f"Kafka (pid {pid}) runs on ports {running_ports[0]}/{running_ports[1]}, not "
                f"{cfg.kafka_port}/{cfg.controller_port}; run `down` first to change "
                "SLOTFLOW_KAFKA_PORT / SLOTFLOW_KAFKA_CONTROLLER_PORT"
            )
        await wait_kafka_ready(cfg, deadline)
        return pid

    conflicts = [
        port_conflict(port, var)
        for port, var in (
            (cfg.kafka_port, "SLOTFLOW_KAFKA_PORT"),
            (cfg.controller_port, "SLOTFLOW_KAFKA_CONTROLLER_PORT"),
        )
        if not port_free(port)
    ]
    if conflicts:
        raise DevstackError("\n".join(conflicts), EXIT_CONFLICT)

    java = find_java()
    await check_java(java)
    # The readiness clock starts once the jars are here: a first fetch from Maven Central on a slow
    # network can take minutes, and counting it against the broker's start-up made a fresh CI machine
    # give up on a broker that was only still booting.
    jars = await ensure_jars(cfg)
    deadline = time.monotonic() + timeout
    cfg.kafka_dir.mkdir(parents=True, exist_ok=True)
    cfg.server_properties.write_text(_server_properties(cfg))
    cid = cluster_id(cfg)
    if not (cfg.kafka_data / "meta.properties").exists():
        say(f"formatting Kafka storage (cluster id {cid})")
        await run_command(
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
    say(f"Kafka {kafka_version()} starting (pid {pid}, log {show(cfg.kafka_log)})")
    try:
        await _wait_kafka_log(cfg, pid, deadline)
        await wait_kafka_ready(cfg, deadline)
    except KafkaStartTimeout as err:
        # A cold JVM on a loaded machine can miss the deadline once; a second start from the same
        # formatted storage is quick. A broker that exited on its own is not retried: its log says why.
        say(f"{str(err).splitlines()[0]} stopping pid {pid} and starting Kafka once more")
        await stop_kafka(cfg=cfg)
        pid = _spawn_kafka(cfg, _kafka_command(cfg, java, jars))
        say(f"Kafka {kafka_version()} starting again (pid {pid}, log {show(cfg.kafka_log)})")
        deadline = time.monotonic() + timeout
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
    if cfg.brokers > 1:
        return await _kafka_cluster.stop_nodes(cfg, kill, timeout)
    pid = kafka_pid(cfg)
    if pid is None:
        cfg.kafka_pid_file.unlink(missing_ok=True)
        return False
    if kill:
        send_signal(pid, signal.SIGKILL)
    else:
        send_signal(pid, signal.SIGTERM)
        send_signal(pid, signal.SIGCONT)  # a SIGSTOPped broker handles SIGTERM only once it runs again
        if not await wait_gone(pid, timeout):
            say(f"Kafka (pid {pid}) still runs after {timeout:.0f} s; sending SIGKILL")
            send_signal(pid, signal.SIGKILL)
    if not await wait_gone(pid, 10.0):
        raise DevstackError(f"Kafka (pid {pid}) survived SIGKILL")
    cfg.kafka_pid_file.unlink(missing_ok=True)
    await wait_ports_free((cfg.kafka_port, cfg.controller_port), 10.0)
    return True
