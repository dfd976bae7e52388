"""Retention: the purge deletes exactly the resolved letters older than the setting, with their
redrive request and notification rows, keeps parked ones unless told otherwise (issue 23), and never
purges a letter whose redrive still waits for its owner's answer."""

import asyncio
from typing import Any

from slotflow.commands import publish_command
from slotflow.contracts import (
    DeadLetterFilter,
    DiscardDeadLetters,
    Envelope,
    RedriveDeadLetters,
    RedriveRequested,
)
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.errors import InvalidPayload, PermanentError
from slotflow.kafka.producer import Producer
from slotflow.kafka.redrive import Answer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.dlq.helpers import origin, park
from tests.integration.dlq.test_commands import owner
from tests.integration.dlq.test_webhook import job_record


async def ids(running: Any, *statuses: str) -> set[str]:
    """The letters kept, of any status or of ``statuses``."""
    rows = await running.pool.fetch(
        "SELECT id FROM dlq.dead_letters WHERE cardinality($1::text[]) = 0 OR status = ANY($1::text[])",
        list(statuses),
    )
    return {r["id"] for r in rows}


_AGE = {
    "status_changed_at": "UPDATE dlq.dead_letters SET status_changed_at = now() - make_interval(days => $2) "
    "WHERE id = $1",
    "first_seen": "UPDATE dlq.dead_letters SET first_seen = now() - make_interval(days => $2) WHERE id = $1",
}


async def age(running: Any, dead_id: str, days: float, column: str = "status_changed_at") -> None:
    """Stand in for the passing of time: the letter's clock column moved back by ``days``."""
    await running.pool.execute(_AGE[column], dead_id, days)


async def test_purge_keeps_exactly_what_the_retention_says(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    # A dead port: the money-moving letter gets a notification row (never delivered).
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    dlq = await start(
        retention_days=30,
        purge_interval_seconds=0.2,
        purge_batch_size=2,  # several batches per pass
        webhook_url=f"http://127.0.0.1:{port}/",
        webhook_max_attempts=1,
        notifier_poll_seconds=0.05,
    )
    commands = kafka.topic(SCHEDULE_COMMANDS)
    for n in range(6):
        await park(producer, kafka, origin(commands, n, b"{}"), InvalidPayload("x"))
    job, money = job_record(kafka, 50, ("money-moving",))
    await park(
        producer,
        kafka,
        money,
        PermanentError("declined"),
        source="claimer",
        reason="permanent_error",
        run_id=job.run_id,
        job_id=job.job_id,
        tags=job.tags,
    )

    async def parked() -> bool:
        return bool(await dlq.count() == 7)

    await assert_eventually(parked, timeout=30)
    letters = [origin(commands, n, b"").position for n in range(6)]
    money_id = money.position
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications") == 1
    # Resolve five: four discarded, the money-moving one redriven (its owner, the claimer, did it).
    await publish_command(
        producer,
        kafka,
        DiscardDeadLetters(selection=DeadLetterFilter(ids=tuple(letters[:4])), reason="obsolete"),
        command_id="discard-old",
        source="test",
    )

    async def claimer(envelope: Envelope, request: RedriveRequested) -> Answer:
        return Answer.done("reopened")

    async with owner(kafka, producer, "claimer", claimer):
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(money_id,))),
            command_id="redrive-money",
            source="test",
        )

        async def resolved() -> bool:
            return len(await ids(dlq, "redriven", "discarded")) == 5

        await assert_eventually(resolved, timeout=30)
    # One more is asked of the ticker, which never answers: it waits, `redriving`, however old.
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(ids=(letters[4],))),
        command_id="redrive-unanswered",
        source="test",
    )
    await assert_eventually(lambda: ids(dlq, "redriving"), timeout=30)
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.redrive_requests") == 2
    # Three resolved long ago, one resolved 29 days ago, one just now; one parked letter
    # first seen long ago: parked letters are kept until resolved; the redriving one waits.
    for dead_id in (letters[0], letters[1], money_id, letters[4]):
        await age(dlq, dead_id, 31)
    await age(dlq, letters[4], 400, column="first_seen")
    await age(dlq, letters[2], 29)
    await age(dlq, letters[5], 400, column="first_seen")

    async def purged() -> bool:
        return letters[0] not in await ids(dlq) and money_id not in await ids(dlq)

    await assert_eventually(purged, timeout=30, message="the old resolved letters purged")
    assert await ids(dlq) == {letters[2], letters[3], letters[4], letters[5]}
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications") == 0
    # The money letter's request went with it; the unanswered one stays with its letter.
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.redrive_requests") == 1
    assert letters[5] in await ids(dlq, "parked")
    assert letters[4] in await ids(dlq, "redriving")


async def test_parked_letters_expire_only_when_a_parked_retention_is_set(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    dlq = await start(retention_days=0, parked_retention_days=90, purge_interval_seconds=0.2)
    topic = kafka.topic(JOBS_DUE)
    for n in range(3):
        await park(producer, kafka, origin(topic, n, b"\xff"), InvalidPayload("x"), reason="undecodable")

    async def parked() -> bool:
        return bool(await dlq.count() == 3)

    await assert_eventually(parked, timeout=30)
    letters = [origin(topic, n, b"").position for n in range(3)]
    await age(dlq, letters[0], 91, column="first_seen")
    await age(dlq, letters[1], 89, column="first_seen")
    # retention_days=0 keeps resolved letters for ever, however old.
    await dlq.pool.execute(
        "UPDATE dlq.dead_letters SET status = 'discarded', status_changed_at = now() - interval '5000 days' "
        "WHERE id = $1",
        letters[2],
    )

    async def expired() -> bool:
        return letters[0] not in await ids(dlq)

    await assert_eventually(expired, timeout=30)
    assert await ids(dlq) == {letters[1], letters[2]}
