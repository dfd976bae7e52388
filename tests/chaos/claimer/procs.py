"""Claimer subprocesses (`python -m slotflow_claimer`) that tests can SIGKILL, SIGSTOP and SIGCONT."""

import os
from pathlib import Path
from typing import Any

from slotflow.settings import KafkaSettings
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.claimer.support import PAYOUTS_DIR, REPO


def claimer_process(
    name: str, kafka: KafkaSettings, pg_dsn: str, log_dir: Path, **settings: Any
) -> ServiceProcess:
    """One claimer serving the chaos handlers, with its own metrics port; ``settings`` are its
    SLOTFLOW_CLAIMER_* settings by lower-case name."""
    port = free_port()
    env = stack_env(
        kafka,
        pg_dsn,
        "SLOTFLOW_CLAIMER_",
        claimer_id=name,
        handler_modules="tests.chaos.claimer.handlers",
        metrics_port=port,
        **settings,
    )
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(PAYOUTS_DIR)])
    return ServiceProcess("slotflow_claimer", name, env=env, log_dir=log_dir, cwd=REPO, metrics_port=port)
