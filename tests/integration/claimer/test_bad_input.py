"""Records that validate but that PostgreSQL refuses, and hostile content, never stop the intake."""

from slotflow.contracts import DeadLettered
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, wait_state


async def test_a_record_the_database_refuses_is_parked_and_its_batch_still_runs(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    seen: list[object] = []

    async def echo(ctx: RunContext) -> dict[str, object]:
        seen.append(ctx.payload.get("note"))
        return {"echo": "nul \x00 inside"}

    registry.register("test.echo", echo)
    before = job_due("before", handler="test.echo")
    # Valid JobDue, but its sequence does not fit the column: the database refuses the row.
    huge = job_due("wf-huge", handler="test.echo", kind="activity", workflow_id="wf-huge", sequence=2**40)
    nul = job_due("nul-payload", handler="test.echo", payload={"note": "a\x00b"})
    after = job_due("after", handler="test.echo")
    await publish(producer, kafka, [before, huge, nul, after])
    claimer = await start_claimer()

    for job in (before, nul, after):
        row = await wait_state(db, job.run_id, "completed")
        assert row["fence_token"] == 1
    assert "a\ufffdb" in seen  # jsonb cannot hold NUL; the stored payload carries U+FFFD instead
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    assert [(letter.data["reason"], letter.data["job_id"]) for letter in letters] == [
        ("unprocessable", "wf-huge")
    ]
    assert await db.fetchval("SELECT count(*) FROM claimer.runs WHERE job_id = 'wf-huge'") == 0
    assert not claimer.fatal.is_set()
