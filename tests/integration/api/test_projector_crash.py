"""A projector that crashes takes the api's readiness with it, and by default the process too.

The crash is a real database error the projector cannot outlive: a trigger refuses every insert into
`projector_state`, then the group is changed as a rebuild would change it, so the projector restarts
on the new group and its claim of the group (an insert) fails. Before the fix the api logged
"stopping the service" and kept serving a frozen read model with /readyz at 200.
"""

import asyncio
from pathlib import Path

import asyncpg
import httpx

from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import ServiceProcess, free_port, stack_env
from tests.integration.api.conftest import TEST_TOKEN

REPO = Path(__file__).resolve().parents[3]

# The projector's group claim is an INSERT ... ON CONFLICT DO NOTHING: a BEFORE INSERT trigger
# fires for it whatever the conflict, so from here on the projector cannot name its group.
_REFUSE_INSERTS = """
CREATE FUNCTION {schema}.refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'projector_state refuses inserts (test)'; END $$;
CREATE TRIGGER refuse_insert BEFORE INSERT ON {schema}.projector_state
FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_insert();
"""
# What a rebuild does to a running projector: a new group, seen at its next check.
_MOVE_GROUP = "UPDATE {schema}.projector_state SET group_id = group_id || '.moved'"


def _api(kafka: KafkaSettings, pg_dsn: str, tmp_path: Path, port: int, **settings: object) -> ServiceProcess:
    env = stack_env(kafka, pg_dsn, "SLOTFLOW_API_", port=port, projector_poll_ms=50, **settings)
    env["SLOTFLOW_API_BOOTSTRAP_TOKEN"] = TEST_TOKEN
    return ServiceProcess("slotflow_api", "api", env=env, log_dir=tmp_path, cwd=REPO, args=["serve"])


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False


async def _crash_the_projector(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(sql(_REFUSE_INSERTS, "api"))
        await conn.execute(sql(_MOVE_GROUP, "api"))
    finally:
        await conn.close()


async def test_a_crashed_projector_stops_the_api_with_a_non_zero_exit(
    kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    api = _api(kafka, pg_dsn, tmp_path, port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await assert_eventually(lambda: _ready(client), timeout=60)
        await _crash_the_projector(pg_dsn)
        code = await asyncio.to_thread(api.proc.wait, 60)
        assert code != 0, api.log()
        assert "the projector loop crashed" in api.log(), api.log()
    finally:
        api.close()


async def test_kept_serving_after_a_crash_the_api_is_not_ready_and_says_why(
    kafka: KafkaSettings, pg_dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    api = _api(kafka, pg_dsn, tmp_path, port, keep_serving_after_crash="true")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await assert_eventually(lambda: _ready(client), timeout=60)
            await _crash_the_projector(pg_dsn)

            async def unready() -> bool:
                return (await client.get("/readyz")).status_code == 503

            await assert_eventually(unready, timeout=30)
            body = (await client.get("/readyz")).json()
            assert body["kafka"] == "ok", body
            assert body["postgres"] == "ok", body
            assert "the projector loop crashed" in body["loops"], body
            assert "projector_state refuses inserts" in body["loops"], body
            # Still serving (stale) reads, as the setting asks.
            listed = await client.get("/v1/schedules", headers={"Authorization": f"Bearer {TEST_TOKEN}"})
            assert listed.status_code == 200, listed.text
            assert api.alive()
    finally:
        api.close()
