"""Redrives carried out by the real owners of the records (docs/decisions/0009), on the real broker
and database with a real ticker, claimer and DLQ service:

- a schedule whose handler name had a typo, fixed by `schedule update`: redriven as it ran, the run
  fails again the same way (the claimer re-issues the JobDue it stored); redriven with the current
  definition, the ticker re-issues the slot with the fixed handler and the run completes once;
- a poison command, refused by a ticker that did not know its type, redriven once a ticker that
  knows it is deployed: read back from its topic (never from the letter's bytes) and applied once,
  however often it is redriven.
"""

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from slotflow.commands import publish_command
from slotflow.contracts import (
    CommandAccepted,
    CreateSchedule,
    DeadLetterFilter,
    PauseSchedule,
    RedriveDeadLetters,
    ScheduleDefinition,
    SchedulePaused,
    UpdateSchedule,
)
from slotflow.contracts.topics import SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import read_messages
from tests.integration.dlq.test_redrive_claimer import claimer_settings
from tests.integration.ticker.support import Replica, db_now, send, start_ticker, stop_ticker


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    replica = await start_ticker(kafka, pg_dsn)
    yield replica
    await stop_ticker(replica)


async def letters_of(dlq: Running, run_id: str) -> list[tuple[str, str, str, str]]:
    rows = await dlq.pool.fetch(
        "SELECT id, status, reason, note FROM dlq.dead_letters WHERE run_id = $1 ORDER BY first_seen", run_id
    )
    return [(r["id"], r["status"], r["reason"], r["note"]) for r in rows]


async def test_a_typod_handler_fixed_by_an_update_runs_when_redriven_with_the_current_definition(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str, ticker: Replica
) -> None:
    ran: list[tuple[str, int]] = []

    async def monthly(ctx: RunContext) -> str:
        ran.append((ctx.run_id, ctx.attempt))
        return "sent"

    registry = HandlerRegistry()
    registry.register("reports.monthly", monthly)
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
    await claimer.start()
    try:
        at = (await db_now(dlq.pool)) + timedelta(seconds=1)
        typo = ScheduleDefinition.model_validate(
            {"spec": {"kind": "once", "at": at.isoformat()}, "handler": "reports.monthy"}
        )
        await send(producer, kafka, CreateSchedule(schedule_id="reports", definition=typo))

        async def dead() -> bool:
            found = await dlq.pool.fetchval("SELECT run_id FROM claimer.runs WHERE job_id = 'reports'")
            return found is not None and len(await letters_of(dlq, str(found))) == 1

        await assert_eventually(dead, timeout=60, message="the typo'd run dead-lettered and parked")
        run = str(await dlq.pool.fetchval("SELECT run_id FROM claimer.runs WHERE job_id = 'reports'"))
        [(first, _, reason, _)] = await letters_of(dlq, run)
        assert reason == "unknown_handler"

        # The fix: `schedule update` names the right handler.
        fixed = typo.model_copy(update={"handler": "reports.monthly"})
        await send(producer, kafka, UpdateSchedule(schedule_id="reports", definition=fixed))

        async def updated() -> bool:
            handler = await dlq.pool.fetchval(
                "SELECT definition->>'handler' FROM ticker.schedules WHERE schedule_id = 'reports'"
            )
            return bool(handler == "reports.monthly")

        await assert_eventually(updated, timeout=30)

        # As it ran: the claimer reopens the run from the JobDue it stored, the typo included.
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(first,))),
            command_id="redrive-as-run",
            source="test",
        )

        async def failed_again() -> bool:
            return len(await letters_of(dlq, run)) == 2

        await assert_eventually(failed_again, timeout=60, message="the run failed again with the typo")
        [(_, status, _, note), (second, _, reason, _)] = await letters_of(dlq, run)
        assert status == "redriven"
        assert "reopened run" in note
        assert reason == "unknown_handler"
        assert ran == []

        # With the current definition: the ticker re-issues the slot with the fixed handler.
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(second,)), definition="current"),
            command_id="redrive-current",
            source="test",
        )

        async def completed() -> bool:
            state = await dlq.pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", run)
            return bool(state == "completed")

        await assert_eventually(completed, timeout=60, message="the run completed with the fixed handler")
        assert ran == [(run, 3)]  # the third attempt: one first, one as it ran, one with the fix
        row = await dlq.pool.fetchrow(
            "SELECT handler, redrive_count FROM claimer.runs WHERE run_id = $1", run
        )
        assert row is not None
        assert (row["handler"], row["redrive_count"]) == ("reports.monthly", 2)

        async def second_redriven() -> bool:
            letters = await letters_of(dlq, run)
            return letters[1][1] == "redriven"

        await assert_eventually(second_redriven, timeout=30)
        note = (await letters_of(dlq, run))[1][3]
        assert "redriven by the ticker: re-issued run" in note
        assert "current definition (handler reports.monthly)" in note
    finally:
        await claimer.stop(grace=0.5)


async def test_a_poison_command_redriven_after_the_fix_is_read_back_and_applied_once(
    dlq: Running,
    producer: Producer,
    kafka: KafkaSettings,
    pg_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    definition = ScheduleDefinition.model_validate(
        {"spec": {"kind": "cron", "expression": "0 2 * * *", "timezone": "UTC"}, "handler": "h"}
    )
    # A ticker deployed before PauseSchedule existed: it parks the command as a type it does not take.
    from slotflow_ticker import command_loop, commands

    older = tuple(m for m in commands.COMMANDS if m is not PauseSchedule)
    monkeypatch.setattr(command_loop, "COMMANDS", older)
    old = await start_ticker(kafka, pg_dsn)
    try:
        await send(producer, kafka, CreateSchedule(schedule_id="nightly", definition=definition))
        await publish_command(
            producer,
            kafka,
            PauseSchedule(schedule_id="nightly", reason="bank holiday"),
            command_id="pause-1",
            source="test",
        )

        async def parked() -> bool:
            return await dlq.count("reason = 'unexpected_type' AND source_service = 'ticker'") == 1

        await assert_eventually(parked, timeout=30, message="the pause parked by the older ticker")
    finally:
        await stop_ticker(old)
    monkeypatch.undo()
    letter = str(await dlq.pool.fetchval("SELECT id FROM dlq.dead_letters WHERE reason = 'unexpected_type'"))
    # The letter's bytes are not what is redriven: spoil them; the record is read back from its topic.
    await dlq.pool.execute("UPDATE dlq.dead_letters SET value = 'spoiled'::bytea WHERE id = $1", letter)

    fixed = await start_ticker(kafka, pg_dsn)  # the deploy that knows PauseSchedule
    try:
        for n, status in enumerate(("parked", "redriven", "redriven")):
            command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(letter,), status=status))  # type: ignore[arg-type]
            await publish_command(producer, kafka, command, command_id=f"redrive-pause-{n}", source="test")

            async def answered(count: int = n + 1) -> bool:
                row = await dlq.pool.fetchrow(
                    "SELECT status, (SELECT count(*) FROM dlq.redrive_requests r "
                    "WHERE r.dead_letter_id = d.id AND r.answered_at IS NOT NULL) AS answers "
                    "FROM dlq.dead_letters d WHERE id = $1",
                    letter,
                )
                return row is not None and row["status"] == "redriven" and row["answers"] == count

            await assert_eventually(answered, timeout=30, message=f"redrive {n + 1} answered by the ticker")
        paused = await dlq.pool.fetchval("SELECT paused FROM ticker.schedules WHERE schedule_id = 'nightly'")
        assert paused is True
        note = await dlq.pool.fetchval("SELECT note FROM dlq.dead_letters WHERE id = $1", letter)
        assert f"redriven by the ticker: ticker read {letter} back and handled it" == note
        events = await read_messages(kafka, kafka.topic(SCHEDULE_EVENTS), 4)
        pauses = [m for _, m in events if isinstance(m, SchedulePaused)]
        accepted = [m for _, m in events if isinstance(m, CommandAccepted) and m.command_id == "pause-1"]
        assert len(pauses) == 1  # applied once, however often it was redriven
        assert len(accepted) == 1
    finally:
        await stop_ticker(fixed)
