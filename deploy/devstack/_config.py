"""The devstack's configuration: ports and paths from the environment, the state directory, the
error type the CLI turns into an exit code, and progress output on stderr.

The other devstack modules (_processes, _kafka, _postgres, devstack) import from this one; it imports
none of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]

PG_ROLE = "slotflow"
PG_DATABASE = "slotflow"
STATE_MARKER = ".slotflow-devstack"

#: SLOTFLOW_DEVSTACK_KAFKA_SECURITY: the broker's client listener. `plaintext` (the default) or
#: `sasl_ssl` (TLS with a CA of the devstack's own, SCRAM users, StandardAuthorizer ACLs).
KAFKA_SECURITY_MODES = ("plaintext", "sasl_ssl")

EXIT_ERROR = 1
EXIT_CONFLICT = 2
EXIT_DOWN = 3


class DevstackError(Exception):
    """A failure with a message for the user; main() prints it and exits non-zero."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def say(message: str) -> None:
    """Progress and diagnostics go to stderr; stdout is reserved for the export lines."""
    print(f"devstack: {message}", file=sys.stderr, flush=True)


def show(path: Path) -> str:
    """A path relative to the repository when it is inside it (for messages)."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


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


def _security_from_env() -> str:
    raw = os.environ.get("SLOTFLOW_DEVSTACK_KAFKA_SECURITY", "").strip().lower() or "plaintext"
    if raw not in KAFKA_SECURITY_MODES:
        raise DevstackError(
            f"SLOTFLOW_DEVSTACK_KAFKA_SECURITY={raw!r}: choose one of {', '.join(KAFKA_SECURITY_MODES)}"
        )
    return raw


def _flag_from_env(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise DevstackError(f"{name}={raw!r}: expected 1 or 0")


@dataclass(frozen=True)
class ExtraListener:
    """A further PLAINTEXT listener on the broker, advertised at another port: the system fault
    suite puts a proxy of its own at `advertised_port` for each service, so the service's every
    connection to the broker (metadata included) passes through it."""

    name: str
    port: int
    advertised_port: int


def _extra_listeners_from_env() -> tuple[ExtraListener, ...]:
    raw = os.environ.get("SLOTFLOW_KAFKA_EXTRA_LISTENERS", "").strip()
    listeners: list[ExtraListener] = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        fields = item.split(":")
        if len(fields) != 3 or not re.fullmatch(r"[A-Z][A-Z0-9_]*", fields[0]):
            raise DevstackError(
                f"SLOTFLOW_KAFKA_EXTRA_LISTENERS: {item!r} is not NAME:PORT:ADVERTISED_PORT (NAME in capitals)"
            )
        if fields[0] in {"PLAINTEXT", "CONTROLLER"}:
            raise DevstackError(f"SLOTFLOW_KAFKA_EXTRA_LISTENERS: {fields[0]} is the devstack's own listener")
        try:
            port, advertised = int(fields[1]), int(fields[2])
        except ValueError:
            raise DevstackError(
                f"SLOTFLOW_KAFKA_EXTRA_LISTENERS: {item!r} has a port that is not a number"
            ) from None
        listeners.append(ExtraListener(fields[0], port, advertised))
    return tuple(listeners)


def _brokers_from_env() -> int:
    raw = os.environ.get("SLOTFLOW_KAFKA_BROKERS", "").strip()
    if raw in ("", "1"):
        return 1
    if raw == "3":
        return 3
    raise DevstackError(f"SLOTFLOW_KAFKA_BROKERS={raw!r}: expected 1 or 3")


@dataclass(frozen=True)
class KafkaNode:
    """One broker of the 3-broker cluster (SLOTFLOW_KAFKA_BROKERS=3): its id, ports and files.

    Node n listens at SLOTFLOW_KAFKA_PORT + 2(n-1) and its controller at
    SLOTFLOW_KAFKA_CONTROLLER_PORT + 2(n-1); its files are kafka-<n>/, kafka-<n>.log, kafka-<n>.pid,
    so a state dir of the one-broker mode is never mistaken for a node of this one.
    """

    node_id: int
    port: int
    controller_port: int
    state_dir: Path

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}"

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def data(self) -> Path:
        return self.kafka_dir / "data"

    @property
    def server_properties(self) -> Path:
        return self.kafka_dir / "server.properties"

    @property
    def log(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def gc_log(self) -> Path:
        return self.state_dir / f"{self.name}-gc.log"


@dataclass(frozen=True)
class MechanismListeners:
    """SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS=A,B,C (sasl_ssl mode only): three further client
    listeners, so a test can reach the broker with every protocol and mechanism slotflow supports.
    Off by default: the OAUTHBEARER listener trusts unsigned tokens (Kafka's unsecured validator),
    and SASL_PLAINTEXT sends PLAIN passwords in clear; both are for tests on loopback only."""

    #: SASL_SSL with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (unsigned JWS tokens).
    sasl_ssl: int
    #: SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
    sasl_plaintext: int
    #: SSL with a client certificate required (signed by the devstack's CA; principal = its CN).
    mtls: int

    @property
    def ports(self) -> tuple[int, int, int]:
        return (self.sasl_ssl, self.sasl_plaintext, self.mtls)


def _mechanism_listeners_from_env() -> MechanismListeners | None:
    name = "SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS"
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    parts = [part.strip() for part in raw.split(",")]
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise DevstackError(
            f"{name}={raw!r}: expected three port numbers SASL_SSL,SASL_PLAINTEXT,SSL (e.g. 19094,19095,19096)"
        )
    ports = [int(part) for part in parts]
    if not all(1 <= port <= 65535 for port in ports):
        raise DevstackError(f"{name}={raw!r}: a port is outside 1..65535")
    return MechanismListeners(*ports)


@dataclass(frozen=True)
class Config:
    state_dir: Path
    cache_dir: Path
    kafka_port: int
    controller_port: int
    pg_port: int
    kafka_security: str = "plaintext"
    #: SLOTFLOW_PG_TLS=1: PostgreSQL serves TLS with a certificate of the devstack's own CA, and
    #: the DSN asks for sslmode=verify-full against that CA.
    pg_tls: bool = False
    extra_listeners: tuple[ExtraListener, ...] = ()
    #: SLOTFLOW_KAFKA_BROKERS=3: three KRaft nodes (each broker and controller) instead of one.
    brokers: int = 1
    #: SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS: the secured broker's further listeners (see
    #: MechanismListeners); None: the SASL_SSL listener only.
    mechanism_listeners: MechanismListeners | None = None

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
            kafka_security=_security_from_env(),
            pg_tls=_flag_from_env("SLOTFLOW_PG_TLS"),
            extra_listeners=_extra_listeners_from_env(),
            brokers=_brokers_from_env(),
            mechanism_listeners=_mechanism_listeners_from_env(),
        )
        if cfg.brokers > 1 and cfg.extra_listeners:
            # An extra listener is one port on one broker; three brokers would need one each.
            raise DevstackError(
                "SLOTFLOW_KAFKA_EXTRA_LISTENERS works with one broker only (SLOTFLOW_KAFKA_BROKERS=1)"
            )
        if cfg.brokers > 1 and cfg.secured:
            # The 3-broker mode writes PLAINTEXT listeners only; SCRAM users and TLS are per node work
            # not done yet.
            raise DevstackError(
                "SLOTFLOW_DEVSTACK_KAFKA_SECURITY=sasl_ssl works with one broker only (SLOTFLOW_KAFKA_BROKERS=1)"
            )
        node_ports = [p for n in cfg.kafka_nodes[1:] for p in (n.port, n.controller_port)]
        ports = [
            cfg.kafka_port,
            cfg.controller_port,
            cfg.pg_port,
            *(x.port for x in cfg.extra_listeners),
            *node_ports,
            *(cfg.mechanism_listeners.ports if cfg.mechanism_listeners else ()),
        ]
        if any(not 1 <= p <= 65535 for p in ports):
            raise DevstackError(f"the brokers' ports {node_ports} go past 65535; lower SLOTFLOW_KAFKA_PORT")
        if len(set(ports)) != len(ports):
            raise DevstackError(
                "SLOTFLOW_KAFKA_PORT, SLOTFLOW_KAFKA_CONTROLLER_PORT, SLOTFLOW_PG_PORT, the extra "
                "listeners' ports and SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS must differ "
                f"(got {ports})"
            )
        if cfg.extra_listeners and cfg.secured:
            raise DevstackError(
                "SLOTFLOW_KAFKA_EXTRA_LISTENERS are PLAINTEXT: they would bypass "
                "SLOTFLOW_DEVSTACK_KAFKA_SECURITY=sasl_ssl, so the two cannot be combined"
            )
        if cfg.mechanism_listeners and not cfg.secured:
            raise DevstackError(
                "SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS needs SLOTFLOW_DEVSTACK_KAFKA_SECURITY=sasl_ssl "
                "(the listeners use its CA and users)"
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

    @property
    def kafka_nodes(self) -> tuple[KafkaNode, ...]:
        """The nodes of the 3-broker mode (empty with one broker, which keeps the files above)."""
        if self.brokers == 1:
            return ()
        return tuple(
            KafkaNode(n, self.kafka_port + 2 * (n - 1), self.controller_port + 2 * (n - 1), self.state_dir)
            for n in range(1, self.brokers + 1)
        )

    @property
    def secured(self) -> bool:
        return self.kafka_security == "sasl_ssl"

    @property
    def kafka_tls_dir(self) -> Path:
        """The devstack's CA and the broker's key and certificate (sasl_ssl)."""
        return self.kafka_dir / "tls"

    @property
    def kafka_ca_file(self) -> Path:
        return self.kafka_tls_dir / "ca.pem"

    @property
    def kafka_client_certs_dir(self) -> Path:
        """Client certificates signed by the devstack's CA, one per user (the mTLS listener)."""
        return self.kafka_tls_dir / "clients"

    @property
    def kafka_users_file(self) -> Path:
        """The SCRAM users and their passwords, made at the first format (sasl_ssl)."""
        return self.kafka_dir / "users.json"

    @property
    def kafka_security_file(self) -> Path:
        """Which mode the storage was formatted for: SCRAM users exist only from a format on."""
        return self.kafka_dir / "security-mode"

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

    @property
    def pg_tls_dir(self) -> Path:
        """The devstack's CA (ca.crt is what clients verify the server with; ca.key signs)."""
        return self.state_dir / "pg-tls"

    @property
    def pg_ca_cert(self) -> Path:
        return self.pg_tls_dir / "ca.crt"

    @property
    def pg_server_tls_dir(self) -> Path:
        """The server's certificate and key, beside its data directory (the postgres user owns both)."""
        return self.pg_dir / "tls"

    # Connection settings
    @property
    def bootstrap(self) -> str:
        if self.brokers > 1:
            return ",".join(f"127.0.0.1:{n.port}" for n in self.kafka_nodes)
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def dsn(self) -> str:
        plain = f"postgresql://{PG_ROLE}@127.0.0.1:{self.pg_port}/{PG_DATABASE}"
        if not self.pg_tls:
            return plain
        # verify-full: the chain must end at the devstack's CA and the certificate must name 127.0.0.1.
        return f"{plain}?sslmode=verify-full&sslrootcert={quote(str(self.pg_ca_cert), safe='/')}"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env"

    def env_lines(self) -> str:
        lines = (
            f"export SLOTFLOW_KAFKA_BOOTSTRAP={shlex.quote(self.bootstrap)}\n"
            f"export SLOTFLOW_PG_DSN={shlex.quote(self.dsn)}\n"
        )
        if self.secured:
            # The admin (a super user) for tools and tests; each service's own user is in users.json.
            for name, value in self.kafka_client_env("admin").items():
                lines += f"export {name}={shlex.quote(value)}\n"
            lines += f"export SLOTFLOW_DEVSTACK_KAFKA_USERS={shlex.quote(str(self.kafka_users_file))}\n"
            # The secured mode proves principals: every service started from this shell refuses
            # a command without a valid signature of a registered key (docs/security.md).
            lines += "export SLOTFLOW_COMMAND_SIGNATURES=required\n"
        return lines

    def kafka_client_env(self, user: str) -> dict[str, str]:
        """The SLOTFLOW_KAFKA_* variables a client connecting as ``user`` needs (sasl_ssl)."""
        users = json.loads(self.kafka_users_file.read_text())
        if user not in users:
            raise DevstackError(f"no Kafka user {user!r} in {self.kafka_users_file}")
        return {
            "SLOTFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SLOTFLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "SLOTFLOW_KAFKA_SASL_USERNAME": user,
            "SLOTFLOW_KAFKA_SASL_PASSWORD": str(users[user]),
            "SLOTFLOW_KAFKA_SSL_CAFILE": str(self.kafka_ca_file),
        }


def prepare_state_dir(cfg: Config) -> None:
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / STATE_MARKER).touch()


@contextlib.contextmanager
def state_lock(cfg: Config) -> Iterator[None]:
    """Serialise devstack commands that change state (two `up`s at once would race)."""
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    with (cfg.state_dir / ".lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another devstack command is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
