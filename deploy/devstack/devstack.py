"""slotflow developer stack: one Kafka broker (KRaft; three with SLOTFLOW_KAFKA_BROKERS=3) and one
PostgreSQL, all on 127.0.0.1.

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

This file is the CLI; the work is done in the modules beside it: _config (ports, paths, errors),
_processes (pid files, ports, spawning and signalling), _kafka and _postgres. The names chaos tests
use are re-exported here (__all__), so loading this one file is enough.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

try:
    import asyncpg

    from slotflow.contracts.topics import TOPICS
    from slotflow.errors import SlotflowError
    from slotflow.kafka.admin import KafkaUnavailable, describe_cluster, ensure_topics, warm_coordinators
    from slotflow.pg.roles import DEFAULT_PREFIX, SERVICE_ROLES, bootstrap_roles
except ImportError as _err:  # pragma: no cover - only without the virtualenv
    sys.exit(f"devstack: cannot import {_err.name}: run `make setup` first, then use .venv/bin/python")

# Run as a script, this directory is sys.path[0]. A test that loads this file by path
# (importlib.util.spec_from_file_location) has not put it there, and the modules beside it must import.
sys.path.append(str(Path(__file__).resolve().parent))

from _config import (
    EXIT_CONFLICT,
    EXIT_DOWN,
    EXIT_ERROR,
    HERE,
    PG_DATABASE,
    PG_ROLE,
    REPO_ROOT,
    STATE_MARKER,
    Config,
    DevstackError,
    MechanismListeners,
    prepare_state_dir,
    say,
    show,
    state_lock,
)
from _kafka import (
    KAFKA_STOP_TIMEOUT_S,
    KAFKA_TIMEOUT_S,
    MVN_MISSING,
    POM,
    check_java,
    cluster_id,
    ensure_jars,
    find_java,
    jars_complete,
    jars_dir,
    kafka_pid,
    kafka_pids,
    kafka_version,
    listener_ports,
    start_kafka,
    stop_kafka,
    wait_kafka_ready,
)
from _kafka_cluster import node_by_id, start_nodes, stop_node
from _kafka_security import (
    admin_security,
    check_formatted_mode,
    client_certificate,
    client_security,
    grant_service_acls,
    users,
)
from _postgres import (
    PG_TIMEOUT_S,
    PgStopMode,
    as_pg_user,
    ensure_pg_bin,
    find_pg_bin,
    postgres_pid,
    postgres_running_port,
    running_with_tls,
    start_postgres,
    stop_postgres,
)
from _processes import port_answers, port_conflict, port_free, proc_state

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_DOWN",
    "EXIT_ERROR",
    "HERE",
    "KAFKA_TIMEOUT_S",
    "PG_TIMEOUT_S",
    "POM",
    "REPO_ROOT",
    "Config",
    "DevstackError",
    "MechanismListeners",
    "PgStopMode",
    "admin_security",
    "client_certificate",
    "client_security",
    "cluster_id",
    "ensure_jars",
    "ensure_pg_bin",
    "find_pg_bin",
    "grant_service_acls",
    "jars_dir",
    "kafka_pid",
    "kafka_pids",
    "kafka_version",
    "main",
    "node_by_id",
    "postgres_pid",
    "say",
    "start_kafka",
    "start_nodes",
    "start_postgres",
    "stop_kafka",
    "stop_node",
    "stop_postgres",
    "users",
    "wait_kafka_ready",
]

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


def _write_env(cfg: Config) -> None:
    cfg.env_file.write_text(cfg.env_lines())


def _print_env(cfg: Config) -> None:
    sys.stdout.write(cfg.env_lines())
    sys.stdout.flush()


async def cmd_up(cfg: Config) -> int:
    started = time.monotonic()
    prepare_state_dir(cfg)
    # A running broker of the other mode must not get this mode's export lines.
    check_formatted_mode(cfg)
    k_pid, p_pid = kafka_pid(cfg), postgres_pid(cfg)
    if cfg.brokers > 1 and None in kafka_pids(cfg).values():
        k_pid = None  # one node down: start_kafka starts the missing ones
    if (
        k_pid is not None
        and p_pid is not None
        and (
            cfg.brokers > 1 or listener_ports(cfg.server_properties) == (cfg.kafka_port, cfg.controller_port)
        )
        and postgres_running_port(cfg) == cfg.pg_port
        and running_with_tls(cfg) == cfg.pg_tls
        and proc_state(k_pid) != "T"
        and proc_state(p_pid) != "T"
        and port_answers(cfg.kafka_port)
        and port_answers(cfg.pg_port)
    ):
        say(f"already running (Kafka pid {k_pid}, PostgreSQL pid {p_pid}); `status` for details")
        _write_env(cfg)
        _print_env(cfg)
        return 0

    # Refuse early, before anything starts, when a port belongs to someone else.
    conflicts: list[str] = []
    if k_pid is None and cfg.brokers == 1:  # the 3-broker mode checks each node as it starts it
        for port, var in (
            (cfg.kafka_port, "SLOTFLOW_KAFKA_PORT"),
            (cfg.controller_port, "SLOTFLOW_KAFKA_CONTROLLER_PORT"),
        ):
            if not port_free(port):
                conflicts.append(port_conflict(port, var))
    if p_pid is None and not port_free(cfg.pg_port):
        conflicts.append(port_conflict(cfg.pg_port, "SLOTFLOW_PG_PORT"))
    if conflicts:
        raise DevstackError("\n".join(conflicts), EXIT_CONFLICT)
    # Missing tools fail here too, before either server starts.
    if k_pid is None:
        await check_java(find_java())
        if not jars_complete(jars_dir(cfg)) and shutil.which("mvn") is None:
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
        security = admin_security(cfg)
        created = await ensure_topics(cfg.bootstrap, TOPICS, security=security)
        # __consumer_offsets and __transaction_state now, so the first test's group join does not wait.
        await warm_coordinators(cfg.bootstrap, security=security)
        await grant_service_acls(cfg)
    except SlotflowError as err:
        raise DevstackError(f"Kafka runs, but setting it up failed: {err}") from err
    if created:
        say(f"created {len(created)} topics: {', '.join(created)}")
    else:
        say(f"all {len(TOPICS)} topics present")
    _write_env(cfg)
    say(
        f"ready in {time.monotonic() - started:.1f} s: Kafka {cfg.bootstrap} (pid {k_pid}), "
        f"PostgreSQL 127.0.0.1:{cfg.pg_port} (pid {p_pid}); env in {show(cfg.env_file)}"
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
        say(f"deleted {show(cfg.state_dir)} (all Kafka and PostgreSQL data)")
    return 0


def cmd_status(cfg: Config) -> int:
    p_pid = postgres_pid(cfg)
    rows = []
    all_up = True
    if cfg.brokers == 1:
        brokers = [
            (
                "kafka",
                kafka_pid(cfg),
                cfg.kafka_port,
                f" (controller {cfg.controller_port})",
                "SLOTFLOW_KAFKA_PORT",
            )
        ]
    else:
        pids = kafka_pids(cfg)
        brokers = [
            (n.name, pids[n.name], n.port, f" (controller {n.controller_port})", "SLOTFLOW_KAFKA_PORT")
            for n in cfg.kafka_nodes
        ]
    for name, pid, port, extra, env_var in (
        *brokers,
        ("postgres", p_pid, cfg.pg_port, "", "SLOTFLOW_PG_PORT"),
    ):
        answers = port_answers(port)
        if pid is not None and proc_state(pid) == "T":
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
    print(f"state dir {show(cfg.state_dir)}")
    return 0 if all_up else EXIT_DOWN


async def cmd_describe(cfg: Config) -> int:
    try:
        info = await asyncio.wait_for(describe_cluster(cfg.bootstrap, security=admin_security(cfg)), 15)
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
    argv = as_pg_user([str(bindir / "pg_ctl"), "-D", str(cfg.pg_data), *args])
    return subprocess.call(argv, cwd=cfg.pg_dir if cfg.pg_dir.exists() else None)


async def cmd_restart_kafka(cfg: Config, kill: bool, node_id: int | None, down_s: float) -> int:
    if node_id is None:
        await stop_kafka(kill, cfg)
        if down_s:
            await asyncio.sleep(down_s)
        pid = await start_kafka(cfg)
        say(f"Kafka restarted (pid {pid})")
        return 0
    node = node_by_id(cfg, node_id)
    await stop_node(cfg, node, kill, KAFKA_STOP_TIMEOUT_S)
    say(f"{node.name} {'killed' if kill else 'stopped'}")
    if down_s:
        await asyncio.sleep(down_s)
    pids = await start_nodes(cfg, [node], KAFKA_TIMEOUT_S)
    say(f"{node.name} restarted (pid {pids[node.node_id]}); all {cfg.brokers} brokers registered")
    return 0


async def cmd_stop_broker(cfg: Config, node_id: int, kill: bool) -> int:
    node = node_by_id(cfg, node_id)
    stopped = await stop_node(cfg, node, kill, KAFKA_STOP_TIMEOUT_S)
    say(f"{node.name} {'killed' if kill else 'stopped'}" if stopped else f"{node.name} was not running")
    return 0


async def cmd_start_broker(cfg: Config, node_id: int) -> int:
    node = node_by_id(cfg, node_id)
    pids = await start_nodes(cfg, [node], KAFKA_TIMEOUT_S)
    say(f"{node.name} runs (pid {pids[node.node_id]})")
    return 0


async def cmd_restart_postgres(cfg: Config, immediate: bool) -> int:
    await stop_postgres("immediate" if immediate else "fast", cfg)
    pid = await start_postgres(cfg)
    say(f"PostgreSQL restarted (pid {pid})")
    return 0


async def cmd_roles(cfg: Config) -> int:
    """`slotflow db bootstrap-roles` on the devstack's database, then each service's DSN."""
    if postgres_pid(cfg) is None:
        raise DevstackError("PostgreSQL is not running; run `up` first", EXIT_DOWN)
    try:
        await bootstrap_roles(cfg.dsn, DEFAULT_PREFIX)
    except (OSError, asyncpg.PostgresError) as err:
        raise DevstackError(f"bootstrap-roles failed: {err}") from err
    say(f"one role per service in database {PG_DATABASE} (docs/security.md); run a service as its own with:")
    user = f"{PG_ROLE}@"
    for entry in SERVICE_ROLES:
        print(
            f"{entry.service:<13} SLOTFLOW_PG_DSN={shlex.quote(cfg.dsn.replace(user, f'{DEFAULT_PREFIX}{entry.service}@', 1))}"
        )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devstack.py",
        description="slotflow developer stack: Kafka (KRaft, one node) and PostgreSQL on 127.0.0.1.",
        epilog="Environment: SLOTFLOW_DEVSTACK_DIR, SLOTFLOW_KAFKA_PORT, SLOTFLOW_KAFKA_CONTROLLER_PORT, "
        "SLOTFLOW_PG_PORT, SLOTFLOW_KAFKA_BROKERS (1 or 3: three KRaft brokers), "
        "SLOTFLOW_PG_TLS (1: PostgreSQL over TLS, DSN with sslmode=verify-full), "
        "SLOTFLOW_DEVSTACK_KAFKA_SECURITY (plaintext or sasl_ssl), "
        "SLOTFLOW_DEVSTACK_CACHE. See deploy/devstack/README.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("up", help="start Kafka and PostgreSQL, create topics, print the env")
    down = sub.add_parser("down", help="stop what `up` started")
    down.add_argument("--clean", action="store_true", help="also delete the state dir (all data)")
    sub.add_parser("status", help="show what runs; exit 0 if both are up, 3 otherwise")
    sub.add_parser("env", help="print the export lines")
    sub.add_parser("fetch-kafka", help="fetch the Kafka jars into the cache (once) and print their folder")
    sub.add_parser("describe", help="cluster id, API versions and topics, as the broker reports them")
    sub.add_parser("kafka-pid", help="print the broker's pid (exit 3 if it does not run)")
    sub.add_parser("pg-pid", help="print the postmaster's pid (exit 3 if it does not run)")
    sub.add_parser("pg-ctl", help="run pg_ctl -D <data dir> ARGS... as the right OS user", add_help=False)
    sub.add_parser(
        "roles", help="one PostgreSQL role per service (slotflow db bootstrap-roles); print their DSNs"
    )
    restart_kafka = sub.add_parser("restart-kafka", help="stop and start the broker")
    restart_kafka.add_argument("--kill", action="store_true", help="SIGKILL instead of a controlled shutdown")
    restart_kafka.add_argument(
        "--node",
        type=int,
        metavar="N",
        help="only broker N (SLOTFLOW_KAFKA_BROKERS=3); the others keep running",
    )
    restart_kafka.add_argument(
        "--down", type=float, default=0.0, metavar="SECONDS", help="stay down this long before the start"
    )
    stop_broker = sub.add_parser("stop-broker", help="stop one broker N of the 3-broker mode (a fault)")
    stop_broker.add_argument("node", type=int, metavar="N")
    stop_broker.add_argument("--kill", action="store_true", help="SIGKILL instead of a controlled shutdown")
    start_broker = sub.add_parser("start-broker", help="start broker N again (the 3-broker mode)")
    start_broker.add_argument("node", type=int, metavar="N")
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
            check_formatted_mode(cfg)
            _print_env(cfg)
            return 0
        if command == "status":
            return cmd_status(cfg)
        if command == "describe":
            return asyncio.run(cmd_describe(cfg))
        if command == "fetch-kafka":
            print(asyncio.run(ensure_jars(cfg)))
            return 0
        if command == "kafka-pid":
            return cmd_pid(kafka_pid(cfg))
        if command == "pg-pid":
            return cmd_pid(postgres_pid(cfg))
        if command == "roles":
            return asyncio.run(cmd_roles(cfg))
        if command == "down" and not cfg.state_dir.exists():
            say("not running (no state directory)")
            return 0
        with state_lock(cfg):
            if command == "up":
                return asyncio.run(cmd_up(cfg))
            if command == "down":
                return asyncio.run(cmd_down(cfg, bool(args.clean)))
            if command == "restart-kafka":
                if args.down < 0:
                    raise DevstackError("--down must be 0 or more seconds")
                return asyncio.run(cmd_restart_kafka(cfg, bool(args.kill), args.node, float(args.down)))
            if command == "stop-broker":
                return asyncio.run(cmd_stop_broker(cfg, int(args.node), bool(args.kill)))
            if command == "start-broker":
                return asyncio.run(cmd_start_broker(cfg, int(args.node)))
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
