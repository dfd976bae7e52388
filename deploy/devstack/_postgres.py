"""PostgreSQL for the devstack: Debian binaries (apt-get when missing), initdb, pg_ctl start and
stop, the `slotflow` role and database.

A throwaway cluster in its own data directory; the system's `main` cluster is never touched.
start_postgres and stop_postgres are also the API chaos tests use (through devstack.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import asyncpg
from _config import (
    EXIT_CONFLICT,
    PG_DATABASE,
    PG_ROLE,
    Config,
    DevstackError,
    prepare_state_dir,
    say,
    show,
)
from _processes import (
    alive,
    port_conflict,
    port_free,
    proc_cmdline,
    proc_state,
    read_pid,
    run_command,
    send_signal,
    tail,
    wait_gone,
    wait_ports_free,
)
from _tls import ensure_pg_tls

PG_TIMEOUT_S = 60.0
PG_OS_USER = "postgres"
PG_CONF_NAME = "slotflow-devstack.conf"


PgStopMode = Literal["smart", "fast", "immediate"]


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
    await run_command(["apt-get", "update"], what="apt-get update", env=env, stream=True)
    await run_command(
        ["apt-get", "install", "-y", "postgresql"], what="apt-get install postgresql", env=env, stream=True
    )
    found = find_pg_bin()
    if found is None:
        raise DevstackError("apt-get installed postgresql, but initdb/pg_ctl are still not found")
    return found


def as_pg_user(argv: Sequence[str]) -> list[str]:
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
    pid = read_pid(cfg.pg_data / "postmaster.pid")
    if pid is None or not alive(pid):
        return None
    if str(cfg.pg_data) not in " ".join(proc_cmdline(pid)):
        return None  # a stale postmaster.pid whose pid now belongs to something else
    return pid


def postgres_running_port(cfg: Config) -> int | None:
    try:
        lines = (cfg.pg_data / "postmaster.pid").read_text().splitlines()
        return int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


TLS_ON = "ssl = on"


def _pg_conf(cfg: Config) -> str:
    conf = f"""\
# Written by deploy/devstack/_postgres.py at every start; included from postgresql.conf.
listen_addresses = '127.0.0.1'
port = {cfg.pg_port}
unix_socket_directories = '{cfg.pg_socket_dir}'
# Light tuning for test suites: many pools at once. fsync and synchronous_commit keep their
# defaults, so crash tests (pg_ctl stop -m immediate) see real durability.
max_connections = 200
shared_buffers = 256MB
"""
    if cfg.pg_tls:
        tls = cfg.pg_server_tls_dir
        conf += f"""\
# SLOTFLOW_PG_TLS=1: a certificate signed by the devstack's CA ({cfg.pg_ca_cert.name} beside the state dir).
{TLS_ON}
ssl_cert_file = '{tls / "server.crt"}'
ssl_key_file = '{tls / "server.key"}'
ssl_min_protocol_version = 'TLSv1.2'
"""
    return conf


def running_with_tls(cfg: Config) -> bool:
    """Whether the running server was started with TLS (its settings file says so)."""
    try:
        return TLS_ON in (cfg.pg_data / PG_CONF_NAME).read_text().splitlines()
    except OSError:
        return False


async def _initdb(cfg: Config, bindir: Path) -> None:
    cfg.pg_dir.mkdir(parents=True, exist_ok=True)
    cfg.pg_data.mkdir(mode=0o700, exist_ok=True)
    _chown_pg(cfg.pg_dir)
    _chown_pg(cfg.pg_data)
    if os.geteuid() == 0:
        code, _ = await run_command(
            ["runuser", "-u", PG_OS_USER, "--", "test", "-w", str(cfg.pg_data)],
            what="access check",
            check=False,
        )
        if code != 0:
            raise DevstackError(
                f"the {PG_OS_USER} OS user cannot write {cfg.pg_data} (a parent directory is not "
                "world-traversable); set SLOTFLOW_DEVSTACK_DIR to a directory it can reach"
            )
    say(f"initdb {show(cfg.pg_data)}")
    await run_command(
        as_pg_user(
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
    _, out = await run_command([str(bindir / "pg_ctl"), "--version"], what="pg_ctl --version")
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
    prepare_state_dir(cfg)
    deadline = time.monotonic() + timeout
    pid = postgres_pid(cfg)
    if pid is not None:
        if proc_state(pid) == "T":
            raise DevstackError(
                f"PostgreSQL (pid {pid}) is stopped (SIGSTOP); send SIGCONT or restart-postgres"
            )
        running = postgres_running_port(cfg)
        if running is not None and running != cfg.pg_port:
            raise DevstackError(
                f"PostgreSQL (pid {pid}) runs on port {running}, not {cfg.pg_port}; "
                "run `down` first to change SLOTFLOW_PG_PORT"
            )
        if running_with_tls(cfg) != cfg.pg_tls:
            raise DevstackError(
                f"PostgreSQL (pid {pid}) runs with TLS {'on' if running_with_tls(cfg) else 'off'}, "
                f"but SLOTFLOW_PG_TLS asks for {'on' if cfg.pg_tls else 'off'}; "
                "run `restart-postgres` (same SLOTFLOW_PG_TLS) to switch"
            )
        await _pg_bootstrap(cfg, deadline)
        return pid

    if not port_free(cfg.pg_port):
        raise DevstackError(port_conflict(cfg.pg_port, "SLOTFLOW_PG_PORT"), EXIT_CONFLICT)
    bindir = await ensure_pg_bin()
    data_major = _pg_data_major(cfg)
    if data_major is None:
        await _initdb(cfg, bindir)
    else:
        bin_major = await _pg_bin_major(bindir)
        if bin_major and bin_major != data_major:
            raise DevstackError(
                f"{show(cfg.pg_data)} was created by PostgreSQL {data_major}, but the binaries in "
                f"{bindir} are {bin_major}; run `down --clean` to start over"
            )
    if cfg.pg_tls:
        cfg.pg_server_tls_dir.mkdir(mode=0o700, exist_ok=True)
        _chown_pg(cfg.pg_server_tls_dir)
        ensure_pg_tls(cfg.pg_tls_dir, cfg.pg_server_tls_dir)
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
    tls = f", TLS with {show(cfg.pg_ca_cert)}" if cfg.pg_tls else ""
    say(f"PostgreSQL starting on 127.0.0.1:{cfg.pg_port}{tls} (log {show(cfg.pg_log)})")
    code, output = await run_command(
        as_pg_user(
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
        raise DevstackError(f"pg_ctl start failed (exit {code}):\n{output.rstrip()}\n{tail(cfg.pg_log)}")
    pid = postgres_pid(cfg)
    if pid is None:
        raise DevstackError(f"pg_ctl reported success but no postmaster runs; see {show(cfg.pg_log)}")
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
    send_signal(pid, signal.SIGCONT)  # a SIGSTOPped postmaster cannot shut down
    bindir = find_pg_bin()
    if bindir is not None:
        code, output = await run_command(
            as_pg_user(
                [str(bindir / "pg_ctl"), "-D", str(cfg.pg_data), "-m", mode, "-w", "-t", "60", "stop"]
            ),
            what="pg_ctl stop",
            cwd=cfg.pg_dir,
            check=False,
        )
        if code != 0 and alive(pid):
            say(f"pg_ctl stop failed (exit {code}): {output.strip()}")
    else:  # the same signals pg_ctl sends
        send_signal(pid, {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode])
    if not await wait_gone(pid, 60.0):
        say(f"PostgreSQL (pid {pid}) still runs; sending SIGKILL")
        send_signal(pid, signal.SIGKILL)
        await wait_gone(pid, 10.0)
    cfg.pg_pid_file.unlink(missing_ok=True)
    await wait_ports_free((cfg.pg_port,), 10.0)
    return True
