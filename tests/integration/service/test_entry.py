"""Every service runs through the one entry (`slotflow.service.serve`): started as a real process on
the real broker and database, it serves, and SIGTERM drains it to exit status 0."""

import asyncio
from pathlib import Path

import asyncpg
import httpx
import pytest

from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.api.conftest import TEST_TOKEN
from tests.integration.orchestrator.conftest import WORKFLOW_MODULES

REPO = Path(__file__).resolve().parents[3]

#: Each service's module, its settings' prefix and what it needs besides; every one serves its
#: metrics on the port given.
METRICS_SERVICES: dict[str, tuple[str, str, dict[str, str]]] = {
    "ticker": ("slotflow_ticker", "SLOTFLOW_TICKER_", {}),
    "claimer": ("slotflow_claimer", "SLOTFLOW_CLAIMER_", {}),
    "orchestrator": (
        "slotflow_orchestrator",
        "SLOTFLOW_ORCHESTRATOR_",
        {"workflow_modules": ",".join(WORKFLOW_MODULES)},
    ),
    "dlq": ("slotflow_dlq", "SLOTFLOW_DLQ_", {}),
}

#: The group the projector claimed; there is none until a projector has started.
_PROJECTOR_GROUP = "SELECT group_id FROM {schema}.projector_state"


async def _exit_status(process: ServiceProcess, timeout: float = 60) -> int:
    process.proc.terminate()
    return await asyncio.to_thread(process.proc.wait, timeout)


@pytest.mark.parametrize("name", sorted(METRICS_SERVICES))
async def test_a_service_serves_then_sigterm_drains_it_to_exit_zero(
    name: str, kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    module, prefix, needs = METRICS_SERVICES[name]
    port = free_port()
    env = stack_env(kafka, pg_dsn, prefix, metrics_port=port, **needs)
    env["PYTHONPATH"] = str(REPO)
    process = ServiceProcess(module, name, env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port)
    try:
        await assert_eventually(process.ready, timeout=90, interval=0.2, message=f"{name} serves metrics")
        assert await _exit_status(process) == 0, process.log()
    finally:
        process.close()


@pytest.mark.parametrize("args", [["serve"], ["project"]])
async def test_the_api_and_its_projector_alone_drain_to_exit_zero(
    args: list[str], kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    env = stack_env(kafka, pg_dsn, "SLOTFLOW_API_", port=port)
    env["SLOTFLOW_API_BOOTSTRAP_TOKEN"] = TEST_TOKEN
    process = ServiceProcess("slotflow_api", "api", env=env, log_dir=tmp_path, cwd=REPO, args=args)
    try:
        if args == ["serve"]:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:

                async def ready() -> bool:
                    assert process.alive(), process.log()
                    try:
                        return (await client.get("/readyz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await assert_eventually(ready, timeout=90)
        else:

            async def projecting() -> bool:
                # The projector names its consumer group in the read model before it consumes.
                assert process.alive(), process.log()
                conn = await asyncpg.connect(pg_dsn)
                try:
                    return await conn.fetchval(sql(_PROJECTOR_GROUP, "api")) is not None
                finally:
                    await conn.close()

            await assert_eventually(projecting, timeout=90)
        assert await _exit_status(process) == 0, process.log()
        assert "stopped by an error" not in process.log()
    finally:
        process.close()
