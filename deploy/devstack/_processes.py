"""Processes and ports: found by pid file and /proc, never by process name.

A pid is trusted only while /proc says the process lives; callers also check its command line, so a
reused pid is never signalled. Short-lived tools run through run_command, servers through spawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _config import DevstackError

#: Servers this process spawned, by pid: proc_state polls (reaps) one once it exits, so it does not
#: linger as our zombie.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def proc_state(pid: int) -> str | None:
    """The process state letter from /proc (R, S, T, Z, ...), or None when there is no such process."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:  # reap our own exited child
        del _CHILDREN[pid]
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int) -> bool:
    """False once the process is gone. A zombie counts as gone only when its last thread has exited
    (a SIGKILLed JVM's main thread turns Z while other threads still hold its sockets)."""
    state = proc_state(pid)
    if state is None or state == "X":
        return False
    if state == "Z":
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


def proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def port_free(port: int) -> bool:
    """True if 127.0.0.1:port can be bound (SO_REUSEADDR, so TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_answers(port: int, timeout: float = 1.0) -> bool:
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
                    command = " ".join(proc_cmdline(int(proc.name)))[:120]
                    return f"pid {proc.name} ({command})"
        except OSError:
            continue
    return None


def port_conflict(port: int, env_var: str) -> str:
    owner = _port_owner(port)
    held_by = f" by {owner}" if owner else ""
    return (
        f"port 127.0.0.1:{port} is already in use{held_by}, not by this devstack; "
        f"stop that process or choose another port with {env_var}=<port>"
    )


def send_signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


async def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.1)
    return not alive(pid)


async def wait_ports_free(ports: Sequence[int], timeout: float) -> None:
    """After a stop, give the kernel a moment to release the listening sockets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(port_free(p) for p in ports):
            return
        await asyncio.sleep(0.1)


def spawn(argv: Sequence[str], *, log: Path, cwd: Path) -> int:
    """Start a server in its own session with stdout and stderr in `log`; return its pid."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


async def run_command(
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


def read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
