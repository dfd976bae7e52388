"""`slotflow replay --payloads-dsn`: histories whose payloads were offloaded to the real PostgreSQL
payload table replay once the references are resolved."""

import asyncio
import json
import os
import sys
from pathlib import Path

from slotflow.pg.migrations import PAYLOADS, apply_migrations
from slotflow.pg.payloads import PostgresPayloadStore
from slotflow.pg.pool import Pool
from slotflow.workflow.payloads import offload_payloads
from tests.unit.cli.replay_samples import recorded
from tests.unit.cli.replay_samples.recorder import envelopes, record

ROOT = Path(__file__).parents[3]
SCRIPT = Path(sys.executable).with_name("slotflow")


async def slotflow(*argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTFLOW_")}
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), *argv, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_offloaded_payloads_are_resolved_from_the_payload_table(
    pg_pool: Pool, pg_dsn: str, tmp_path: Path
) -> None:
    await apply_migrations(pg_pool, schema="orchestrator", sources=[PAYLOADS])
    store = PostgresPayloadStore(pg_pool, schema="orchestrator")
    history = record(recorded.Pay, "samples.pay", "order-1", {"id": 1, "note": "x" * 200})
    # A tiny threshold: every input, activity payload and result travels by reference.
    offloaded = await offload_payloads(history, store, threshold=16)
    path = tmp_path / "offloaded.json"
    path.write_text(json.dumps(envelopes(offloaded)))
    assert "$slotflow_payload" in path.read_text()
    module = "tests.unit.cli.replay_samples.recorded"

    code, out, err = await slotflow(
        "replay", "--file", str(path), "--module", module, "--payloads-dsn", pg_dsn
    )
    assert (code, out) == (0, "ok  order-1  samples.pay  8 events, completed\n"), err

    await pg_pool.execute("DELETE FROM orchestrator.payloads")
    code, _, err = await slotflow("replay", "--file", str(path), "--module", module, "--payloads-dsn", pg_dsn)
    assert code == 1
    assert "no payload sha256:" in err
