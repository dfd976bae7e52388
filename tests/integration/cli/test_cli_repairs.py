"""`slotflow schedule rerun` and `slotflow schedule mark` against the real api, ticker and claimer:
the typo'd handler fixed by `schedule update`, then `schedule rerun --from --to` runs the slot with
the fixed handler and it completes; a dry run says what it would touch and publishes nothing; a
range with nothing to touch exits non-zero with the reason."""

import json
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from slotflow.core.identity import run_id
from slotflow.pg.pool import Pool, create_pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from tests.integration.cli.conftest import Cli
from tests.integration.dlq.test_redrive_claimer import claimer_settings
from tests.integration.ticker.support import db_now, tickers


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[Pool]:
    p = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=4)
    yield p
    await p.close()


async def test_a_typod_handler_fixed_by_an_update_is_rerun_from_the_cli_and_completes(
    cli: Cli, kafka: KafkaSettings, pg_dsn: str, pool: Pool
) -> None:
    ran: list[str] = []

    async def pay(ctx: RunContext) -> str:
        ran.append(ctx.run_id)
        return "paid"

    registry = HandlerRegistry()
    registry.register("payouts.pay", pay)
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
    await claimer.start()
    try:
        async with tickers(kafka, pg_dsn):
            slot = (await db_now(pool)).replace(microsecond=0) + timedelta(seconds=8)
            run = run_id("payouts", slot)
            at = slot.isoformat()
            created = await cli(
                "schedule", "create", "payouts", "--at", at, "--handler", "payouts.pya", "--wait", "30"
            )
            assert created.code == 0, created

            async def dead_in_the_audit() -> bool:
                audit = await cli(
                    "--json",
                    "audit",
                    "payouts",
                    "--from",
                    at,
                    "--to",
                    (slot + timedelta(seconds=1)).isoformat(),
                )
                # The api may not have projected the run yet: an empty audit is "not yet".
                # A loaded box may apply the create after the one-shot's instant: its run is then off
                # the grid (`unscheduled`), and is re-run all the same.
                body = json.loads(audit.out) if audit.code == 0 else {"slots": [], "unscheduled": []}
                states = [s["run_state"] for s in body["slots"]] + [r["state"] for r in body["unscheduled"]]
                return states == ["dead_lettered"]

            await assert_eventually(dead_in_the_audit, timeout=90, message="the typo'd run dead-lettered")
            updated = await cli("schedule", "update", "payouts", "--handler", "payouts.pay", "--wait", "30")
            assert updated.code == 0, updated

            dry = await cli(
                "schedule", "rerun", "payouts", "--from", at, "--to", at, "--reason", "fixed", "--dry-run"
            )
            assert dry.code == 0, dry
            assert "would touch 1 slot(s) of payouts; nothing was published" in dry.out
            assert run in dry.out
            assert ran == []

            nothing = await cli(
                "schedule",
                "mark",
                "payouts",
                "done",
                "--from",
                (slot + timedelta(minutes=1)).isoformat(),
                "--reason",
                "x",
            )
            assert nothing.code != 0
            assert "holds no slot" in nothing.err

            rerun = await cli(
                "schedule",
                "rerun",
                "payouts",
                "--from",
                at,
                "--to",
                at,
                "--reason",
                "handler fixed",
                "--wait",
                "30",
            )
            assert rerun.code == 0, rerun
            assert "re-run of 1 slot(s) of payouts sent as command" in rerun.out

            async def completed() -> bool:
                state = await pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", run)
                return bool(state == "completed")

            await assert_eventually(
                completed, timeout=60, message="the re-run completed with the fixed handler"
            )
            assert ran == [run]

            # Completed now: a re-run without --force leaves it out and says why (exit non-zero).
            async def refused() -> bool:
                outcome = await cli(
                    "schedule", "rerun", "payouts", "--from", at, "--reason", "again", "--dry-run"
                )
                return outcome.code != 0 and "pass force" in outcome.err

            await assert_eventually(refused, timeout=30, message="the completed slot left out")
    finally:
        await claimer.stop()
