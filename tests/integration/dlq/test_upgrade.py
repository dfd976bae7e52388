"""The dlq's upgrade to redrives through the owners (migration 0003, docs/operations.md): letters the
old relay staged and never published (their topic refused them: the dlq may not write jobs.due in
the secured mode) go back to `parked` with a note, published ones keep their status, the raw redrive
table goes, and older letters of activities name their workflow from their JobDue."""

import json
import shutil
from pathlib import Path

from slotflow.pg.migrations import INBOX, OUTBOX, MigrationSource, apply_migrations
from slotflow.pg.pool import create_pool
from slotflow.settings import PostgresSettings
from slotflow_dlq.app import MIGRATIONS

LETTER = """
INSERT INTO dlq.dead_letters (id, status, reason, error_type, error, source_service, topic, "partition",
    "offset", value, value_size, run_id, decoded)
VALUES ($1, $2, $3, 'E', 'e', 'claimer', 'slotflow.jobs.due.v1', 0, $4, ''::bytea, 0, $5, $6::jsonb)
"""
REDRIVE = """
INSERT INTO dlq.redrives (dead_letter_id, redrive_number, command_id, topic, value, headers, published_at)
VALUES ($1, 1, 'old-redrive', 'slotflow.jobs.due.v1', ''::bytea, '[]'::jsonb, $2)
"""


async def test_unpublished_redrives_of_the_old_relay_go_back_to_parked(
    empty_pg_dsn: str, tmp_path: Path
) -> None:
    before = tmp_path / "before"
    before.mkdir()
    for path in sorted(MIGRATIONS.directory.glob("000[12]_*.sql")):
        shutil.copy(path, before / path.name)
    pool = await create_pool(PostgresSettings(dsn=empty_pg_dsn), min_size=1, max_size=2)
    try:
        await apply_migrations(pool, schema="dlq", sources=[OUTBOX, INBOX, MigrationSource("dlq", before)])
        activity = json.dumps({"type": "job.due", "data": {"workflow_id": "o-1", "sequence": 5}})
        await pool.execute(LETTER, "stuck", "redriven", "unknown_handler", 1, "pay@x", None)
        await pool.execute(LETTER, "sent", "redriven", "unknown_handler", 2, "pay@y", None)
        await pool.execute(LETTER, "activity", "parked", "attempts_exhausted", 3, "o-1/5", activity)
        await pool.execute(LETTER, "poison", "parked", "invalid_payload", 4, None, activity)
        await pool.execute(REDRIVE, "stuck", None)
        await pool.execute(REDRIVE, "sent", None)
        await pool.execute("UPDATE dlq.redrives SET published_at = now() WHERE dead_letter_id = 'sent'")

        await apply_migrations(pool, schema="dlq", sources=[OUTBOX, INBOX, MIGRATIONS])

        rows = {
            r["id"]: (r["status"], r["note"], r["workflow_id"], r["sequence"])
            for r in await pool.fetch("SELECT id, status, note, workflow_id, sequence FROM dlq.dead_letters")
        }
        assert rows == {
            "stuck": (
                "parked",
                "its earlier redrive was never sent (the old relay): redrive it again",
                None,
                None,
            ),
            "sent": ("redriven", "", None, None),
            # An activity's run letter names its workflow; a poison JobDue stays the claimer's record.
            "activity": ("parked", "", "o-1", 5),
            "poison": ("parked", "", None, None),
        }
        assert await pool.fetchval("SELECT to_regclass('dlq.redrives')") is None
        assert await pool.fetchval("SELECT count(*) FROM dlq.redrive_requests") == 0
    finally:
        await pool.close()
