"""Records PostgreSQL would refuse, and hostile content, never stop the intake."""

from slotflow.contracts import DeadLettered
from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, wait_state


async def test_a_record_the_database_would_refuse_is_parked_at_decode_and_its_batch_still_runs(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    seen: list[object] = []

    async def echo(ctx: RunContext) -> dict[str, object]:
        seen.append(ctx.payload.get("note"))
        return {"echo": "nul \x00 inside"}  # a result is made storable (U+FFFD), never refused

    registry.register("test.echo", echo)
    before = job_due("before", handler="test.echo")
    # Written by a producer that does not validate: a sequence past the `integer` column and a NUL
    # in the payload. Before the acceptance rule the first reached the database and was parked
    # only when the insert failed (`unprocessable`), and the second ran with U+FFFD in place of
    # the NUL while the api could not store the same JobDue; both are refused at decode now.
    huge = job_due("wf-huge", handler="test.echo", kind="activity", workflow_id="wf-huge", sequence=1)
    huge = huge.model_copy(update={"sequence": 2**40, "run_id": f"wf-huge/{2**40}"})
    nul = job_due("nul-payload", handler="test.echo").model_copy(update={"payload": {"note": "a\x00b"}})
    after = job_due("after", handler="test.echo")
    await publish(producer, kafka, [before, huge, nul, after])
    claimer = await start_claimer()

    for job in (before, after):
        row = await wait_state(db, job.run_id, "completed")
        assert row["fence_token"] == 1
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type, count=2)
    assert sorted((letter.data["reason"], letter.data["job_id"]) for letter in letters) == [
        ("invalid_payload", "nul-payload"),
        ("invalid_payload", "wf-huge"),
    ]
    errors = " ".join(letter.data["error"] for letter in letters)
    assert "sequence: Input should be less than or equal to 2147483647" in errors
    assert "payload.note: contains a NUL character" in errors
    assert seen == [None, None]  # only `before` and `after` ran
    assert (
        await db.fetchval("SELECT count(*) FROM claimer.runs WHERE job_id IN ('wf-huge', 'nul-payload')") == 0
    )
    assert not claimer.fatal.is_set()
