"""Orchestrator subprocesses (`python -m slotflow_orchestrator`) that tests SIGKILL, SIGSTOP, SIGCONT."""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from slotflow.settings import KafkaSettings
from tests.chaos.claimer.procs import free_port
from tests.integration.claimer.support import REPO
from tests.integration.orchestrator.conftest import WORKFLOW_MODULES


class OrchestratorProcess:
    """One orchestrator process serving the test saga, with its own metrics port and log file."""

    def __init__(self, name: str, kafka: KafkaSettings, pg_dsn: str, log_dir: Path, **settings: Any) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
        env.update(
            {
                "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
                "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
                "SLOTFLOW_PG_DSN": pg_dsn,
                "SLOTFLOW_ORCHESTRATOR_INSTANCE_ID": name,
                "SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES": ",".join(WORKFLOW_MODULES),
                "SLOTFLOW_ORCHESTRATOR_METRICS_PORT": str(self.port),
                "SLOTFLOW_ORCHESTRATOR_IDLE_POLL_SECONDS": "0.02",
                "SLOTFLOW_ORCHESTRATOR_LEASE_CHECK_SECONDS": "0.2",
                "PYTHONPATH": str(REPO),
            }
        )
        for key, value in settings.items():
            env[f"SLOTFLOW_ORCHESTRATOR_{key.upper()}"] = str(value)
        self._log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slotflow_orchestrator"],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=self._log,
        )

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def metrics(self) -> dict[str, float]:
        async with httpx.AsyncClient(timeout=2.0) as client:
            response = await client.get(f"http://127.0.0.1:{self.port}/metrics")
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    async def ready(self) -> bool:
        if not self.alive():
            raise AssertionError(f"orchestrator {self.name} exited: {self.log()}")
        try:
            await self.metrics()
        except httpx.HTTPError:
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._log.close()
