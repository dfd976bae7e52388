"""A service as a real process (`python -m <module>`), for tests that SIGKILL, SIGSTOP or restart it.

The process gets only the ``SLOTFLOW_*`` settings it is given (the test runner's own are dropped,
so a test's stack never leaks in from the environment), writes stdout and stderr to one log file
that restarts append to, and, given a metrics port, can be asked whether it serves yet.
"""

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from slotflow.settings import KafkaSettings
from slotflow.testing.waiting import assert_eventually


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stack_env(kafka: KafkaSettings, pg_dsn: str, prefix: str = "", **settings: Any) -> dict[str, str]:
    """The settings that point a service process at a test's stack (broker, its TLS and SASL
    settings, topic namespace, database), plus ``settings`` by lower-case name under ``prefix`` (``SLOTFLOW_CLAIMER_``)."""
    env = {
        "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
        "SLOTFLOW_PG_DSN": pg_dsn,
        **kafka.security.env(),
    }
    env.update({f"{prefix}{key.upper()}": str(value) for key, value in settings.items()})
    return env


class ServiceProcess:
    """One service process: its pid is the service's own, so signals reach it and not a shell."""

    def __init__(
        self,
        module: str,
        name: str,
        *,
        env: Mapping[str, str],
        log_dir: Path,
        cwd: Path | None = None,
        args: Sequence[str] = (),
        python: Path | str = sys.executable,
        metrics_port: int | None = None,
    ) -> None:
        self.module, self.name, self.args = module, name, tuple(args)
        self.python, self.cwd, self.port = str(python), cwd, metrics_port
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        self.env.update(env)
        #: Set before `start` to change the next start's environment (LD_PRELOAD for a skewed clock).
        self.extra_env: dict[str, str] = {}
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("ab")
        self.proc: subprocess.Popen[bytes]
        self.start()

    def start(self) -> None:
        """Start the process (again, after `kill`): the log file is appended to."""
        # The command is this interpreter (or the stats one) and a service module a test names.
        self.proc = subprocess.Popen(  # noqa: S603
            [self.python, "-m", self.module, *self.args],
            cwd=self.cwd,
            env={**self.env, **self.extra_env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` if the process still runs (a dead one is not an error: faults race exits)."""
        if self.alive():
            self.proc.send_signal(sig)

    async def metrics(self) -> dict[str, float]:
        """Every sample of the process's metrics endpoint, by name with labels."""
        if self.port is None:
            raise AssertionError(f"{self.name} was started without a metrics port")
        async with httpx.AsyncClient(timeout=2.0) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}/metrics")
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    async def ready(self) -> bool:
        """Whether it serves metrics yet; a process that exited fails the wait with its log."""
        if not self.alive():
            raise AssertionError(f"{self.name} exited: {self.log()}")
        try:
            await self.metrics()
        except httpx.HTTPError:
            return False
        return True

    def log(self, chars: int = 4000) -> str:
        """The end of the log file."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL (after SIGCONT, so a stopped process dies too) and wait: no flush, no goodbye."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM and wait up to ``timeout`` for a drained exit, then SIGKILL; the log is closed."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()

    def close(self) -> None:
        """Kill it (a test's end needs no drain) and close the log."""
        self.kill(timeout=10.0)
        self._log.close()


class ProcessGroup:
    """The processes one test started: each waited for until it serves, all closed at its end."""

    def __init__(self) -> None:
        self.started: list[ServiceProcess] = []

    async def start(self, proc: ServiceProcess, timeout: float = 60.0) -> ServiceProcess:
        """``proc`` once it serves metrics (it is closed with the group even if it never does)."""
        self.started.append(proc)
        await assert_eventually(proc.ready, timeout=timeout, interval=0.2, message=f"{proc.name} ready")
        return proc

    def close(self) -> None:
        for proc in self.started:
            proc.close()
