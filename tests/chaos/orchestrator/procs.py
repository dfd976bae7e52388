"""Orchestrator subprocesses (`python -m slotflow_orchestrator`) that tests SIGKILL, SIGSTOP, SIGCONT."""

from pathlib import Path
from typing import Any

from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.claimer.support import REPO
from tests.integration.orchestrator.conftest import WORKFLOW_MODULES


def orchestrator_process(
    name: str, kafka: KafkaSettings, pg_dsn: str, log_dir: Path, **settings: Any
) -> ServiceProcess:
    """One orchestrator serving the test saga, with its own metrics port, polling fast; ``settings``
    are its SLOTFLOW_ORCHESTRATOR_* settings by lower-case name."""
    port = free_port()
    fast: dict[str, Any] = {"idle_poll_seconds": 0.02, "lease_check_seconds": 0.2}
    env = stack_env(
        kafka,
        pg_dsn,
        "SLOTFLOW_ORCHESTRATOR_",
        instance_id=name,
        workflow_modules=",".join(WORKFLOW_MODULES),
        metrics_port=port,
        **(fast | settings),
    )
    env["PYTHONPATH"] = str(REPO)
    return ServiceProcess(
        "slotflow_orchestrator", name, env=env, log_dir=log_dir, cwd=REPO, metrics_port=port
    )
