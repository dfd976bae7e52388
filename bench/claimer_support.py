"""Shared set-up for the claimer benchmarks: a fresh database and topic namespace, claimer
processes, and a machine fingerprint."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import httpx
from _common import REPO, process_cpu_seconds, scratch_database

from slotflow.pg.pool import Pool, create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_claimer.app import migrate


@asynccontextmanager
async def fresh_database(pool_size: int = 8) -> AsyncIterator[tuple[str, Pool]]:
    """A new database with the claimer schema migrated; dropped afterwards."""
    async with scratch_database() as dsn:
        pool = await create_pool(PostgresSettings(dsn=dsn), min_size=2, max_size=pool_size)
        try:
            await migrate(pool)
            yield dsn, pool
        finally:
            await pool.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ClaimerProcess:
    """`python -m slotflow_claimer` with the benchmark handlers and its own metrics port."""

    def __init__(self, name: str, kafka: KafkaSettings, dsn: str, log_dir: Path, **settings: Any) -> None:
        self.name = name
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update(
            {
                "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
                "SLOTFLOW_PG_DSN": dsn,
                "SLOTFLOW_CLAIMER_CLAIMER_ID": name,
                "SLOTFLOW_CLAIMER_HANDLER_MODULES": "claimer_handlers",
                "SLOTFLOW_CLAIMER_METRICS_PORT": str(self.port),
                # CLAIMER_PYTHONPATH: run the claimers from another checkout's sources (the
                # benchmark's before/after comparisons in one session).
                "PYTHONPATH": os.pathsep.join(
                    p for p in (os.environ.get("CLAIMER_PYTHONPATH", ""), str(REPO / "bench")) if p
                ),
            }
        )
        env.update({f"SLOTFLOW_CLAIMER_{k.upper()}": str(v) for k, v in settings.items()})
        self._log: IO[bytes] = (log_dir / f"{name}.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slotflow_claimer"], cwd=REPO, env=env, stdout=self._log, stderr=self._log
        )

    async def wait_ready(self, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with httpx.AsyncClient(timeout=1.0) as client:
            while loop.time() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"claimer {self.name} exited with {self.proc.returncode}")
                try:
                    await client.get(f"http://127.0.0.1:{self.port}/metrics")
                    return
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
        raise SystemExit(f"claimer {self.name} not ready in {timeout} s")

    def cpu_seconds(self) -> float:
        """User + system CPU of the process so far (from /proc)."""
        return process_cpu_seconds(self.proc.pid)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def broker_pid() -> int | None:
    """The local Kafka broker's process (the JVM running kafka.Kafka), if there is one."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"kafka.Kafka" in cmdline and b"java" in cmdline:
            return int(entry.name)
    return None


class BackendCpu:
    """CPU of the PostgreSQL backends serving one database (the server runs on this machine).

    Backends that connect during the measurement count from zero. Shared server processes (WAL
    writer, checkpointer) are not included.
    """

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._before: dict[int, float] = {}

    async def _pids(self) -> list[int]:
        rows = await self._pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return [int(r["pid"]) for r in rows]

    async def start(self) -> None:
        self._before = {pid: process_cpu_seconds(pid) for pid in await self._pids()}

    async def seconds(self) -> float:
        return sum(process_cpu_seconds(pid) - self._before.get(pid, 0.0) for pid in await self._pids())


async def wait_group_stable(kafka: KafkaSettings, group: str, members: int, timeout: float = 60.0) -> None:
    """Until the consumer group has ``members`` members and a settled assignment."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            described: Any = await admin.describe_consumer_groups([group])
            state = described[0].groups[0]
            if state[2] == "Stable" and len(state[5]) == members:
                return
            await asyncio.sleep(0.2)
        raise SystemExit(f"group {group} not stable with {members} members in {timeout} s")
    finally:
        await admin.close()
