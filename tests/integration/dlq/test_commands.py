"""Redrive and discard through commands on Kafka, against a real DLQ service (docs/decisions/0009).

A redrive stages one RedriveRequested per letter on the internal redrive topic, for the service
that owns the letter's record, and the letter reads `redriving` until that owner answers on the
DLQ topic: `redriven`, or `redrive_failed` with the owner's reason. The owner here is the library's
own responder (`slotflow.kafka.redrive.RedriveResponder`) answering as the claimer would; the real
owners are exercised in test_redrive_claimer.py, test_redrive_owners.py and the orchestrator's and
security tests.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from slotflow.commands import publish_command
from slotflow.contracts import (
    CommandAccepted,
    CommandRejected,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    DiscardDeadLetters,
    Envelope,
    JobDue,
    RedriveDeadLetters,
    RedriveOutcome,
    RedriveRequested,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.dlq import redrive_outcome_id
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_MESSAGES, DLQ_REDRIVES, JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.core.identity import run_id
from slotflow.errors import InvalidPayload, PermanentError
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.kafka.redrive import Answer, RedriveResponder
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_dlq import queries
from slotflow_dlq.store import EVERYTHING, NOTHING
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import AT, origin, park, read_messages

Handler = Callable[[Envelope, RedriveRequested], Awaitable[Answer | None]]


def job_value(n: int) -> bytes:
    job = JobDue(run_id=run_id("pay", AT), job_id="pay", slot=AT, handler="pay")
    return encode(wrap(job, id=job.run_id, key="pay", source="ticker", occurred_at=AT))


async def status(dlq: Running, dead_letter_id: str) -> tuple[str, int, str]:
    row = await dlq.pool.fetchrow(
        "SELECT status, redrive_count, note FROM dlq.dead_letters WHERE id = $1", dead_letter_id
    )
    return (row["status"], row["redrive_count"], row["note"]) if row else ("missing", 0, "")


@asynccontextmanager
async def owner(
    kafka: KafkaSettings, producer: Producer, service: str, handler: Handler
) -> AsyncIterator[None]:
    """A service answering the redrive requests addressed to it with ``handler``."""
    responder = RedriveResponder(
        kafka,
        service=service,
        producer=producer,
        group_id=unique_name(f"owner-{service}"),
        on_request=handler,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(responder.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


async def parked_run(dlq: Running, producer: Producer, kafka: KafkaSettings, offset: int) -> str:
    record = origin(kafka.topic(JOBS_DUE), offset, job_value(offset), key=b"pay")
    await park(
        producer,
        kafka,
        record,
        PermanentError("no handler"),
        source="claimer",
        reason="unknown_handler",
        run_id=run_id("pay", AT),
        job_id="pay",
    )
    await assert_eventually(lambda: dlq.count("id = $1", record.position), timeout=30)
    return record.position


async def test_a_redrive_asks_the_owner_and_the_letter_follows_its_answers(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    dead_id = await parked_run(dlq, producer, kafka, 5)
    command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,)))
    await publish_command(producer, kafka, command, command_id="redrive-1", source="test")
    await publish_command(producer, kafka, command, command_id="redrive-1", source="test")  # a client retry

    async def asked() -> bool:
        return (await status(dlq, dead_id))[:2] == ("redriving", 1)

    await assert_eventually(asked, timeout=30)
    [(_, request)] = await read_messages(kafka, kafka.topic(DLQ_REDRIVES), 1)  # once per command id
    assert isinstance(request, RedriveRequested)
    assert (request.target, request.kind, request.definition, request.redrive) == (
        "claimer",
        "run",
        "as_run",
        1,
    )
    assert (request.topic, request.partition, request.offset) == (kafka.topic(JOBS_DUE), 1, 5)
    assert (request.run_id, request.job_id, request.slot) == (run_id("pay", AT), "pay", AT)
    assert request.command_id == "redrive-1"
    # Nothing answered yet: it says who was asked, and waits (the gauge shows how long).
    assert "redrive asked of the claimer by redrive-1" in (await status(dlq, dead_id))[2]

    answers = iter([Answer.done("reopened run pay as attempt 2"), Answer.refused("run pay is completed")])

    async def claimer(envelope: Envelope, asked: RedriveRequested) -> Answer:
        return next(answers)

    async with owner(kafka, producer, "claimer", claimer):

        async def redriven() -> bool:
            return (await status(dlq, dead_id))[0] == "redriven"

        await assert_eventually(redriven, timeout=30)
        assert (await status(dlq, dead_id))[2] == "redriven by the claimer: reopened run pay as attempt 2"

        # Redriving again is an explicit choice (status "redriven"): a new request, a new number.
        again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,), status="redriven"))
        await publish_command(producer, kafka, again, command_id="redrive-2", source="test")

        async def refused() -> bool:
            return (await status(dlq, dead_id))[0] == "redrive_failed"

        await assert_eventually(refused, timeout=30)
    assert await status(dlq, dead_id) == ("redrive_failed", 2, "refused by the claimer: run pay is completed")

    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 7)
    changes = [m for _, m in events if isinstance(m, DeadLetterStatusChanged)]
    assert [(c.status, c.redrive_count, c.redrive_target) for c in changes] == [
        ("parked", 0, None),
        ("redriving", 1, "claimer"),
        ("redriven", 1, "claimer"),
        ("redriving", 2, "claimer"),
        ("redrive_failed", 2, "claimer"),
    ]
    accepted = {m.command_id: m.subject for _, m in events if isinstance(m, CommandAccepted)}
    assert accepted == {
        "redrive-1": "redrove 1 dead letter(s); 1 asked of their owners (claimer 1); they answer each",
        "redrive-2": "redrove 1 dead letter(s); 1 asked of their owners (claimer 1); they answer each",
    }
    detail = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=dead_id)
    assert detail is not None
    assert [(r.command_id, r.target, r.redrive, r.outcome) for r in detail.redrives] == [
        ("redrive-1", "claimer", 1, "done"),
        ("redrive-2", "claimer", 2, "refused"),
    ]
    registry = dlq.service.metrics.registry
    assert registry.get_sample_value("slotflow_dlq_redrives_total", {"target": "claimer"}) == 2
    assert registry.get_sample_value("slotflow_dlq_redrive_outcomes_total", {"outcome": "done"}) == 1
    assert registry.get_sample_value("slotflow_dlq_redrive_outcomes_total", {"outcome": "refused"}) == 1


async def test_an_unanswered_request_stays_redriving_with_its_age_and_blocks_nothing(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    """Each request is a record of its own: one nobody answers stays visibly `redriving`; one no
    owner can take is refused at once; the ones after both go on as usual."""
    waiting = await parked_run(dlq, producer, kafka, 6)
    foreign = origin("someone-elses.payments.v1", 3, b"forged", key=b"k")
    await park(producer, kafka, foreign, PermanentError("x"), source="claimer", reason="permanent_error")
    await assert_eventually(lambda: dlq.count("id = $1", foreign.position), timeout=30)
    first = RedriveDeadLetters(selection=DeadLetterFilter(ids=(waiting, foreign.position)))
    await publish_command(producer, kafka, first, command_id="redrive-both", source="test")

    async def settled() -> bool:
        return (await status(dlq, foreign.position))[0] == "redrive_failed"

    await assert_eventually(settled, timeout=30)
    assert (
        "its topic 'someone-elses.payments.v1' is not one of this deployment's"
        in (await status(dlq, foreign.position))[2]
    )
    assert (await status(dlq, waiting))[0] == "redriving"

    async def aged() -> bool:
        age = dlq.service.metrics.registry.get_sample_value("slotflow_dlq_oldest_redriving_age_seconds")
        return age is not None and age >= 1.0

    await assert_eventually(aged, timeout=30, message="the gauge shows the request's age")

    later = await parked_run(dlq, producer, kafka, 7)

    async def claimer(envelope: Envelope, asked: RedriveRequested) -> Answer | None:
        # This owner answers only the later letter: the first request stays unanswered.
        return Answer.done("reopened") if asked.dead_letter_id == later else None

    async with owner(kafka, producer, "claimer", claimer):
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(later,))),
            command_id="redrive-later",
            source="test",
        )

        async def done() -> bool:
            return (await status(dlq, later))[0] == "redriven"

        await assert_eventually(done, timeout=30, message="the later redrive went through at once")
    assert (await status(dlq, waiting))[0] == "redriving"
    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 6)
    [ack] = [m for _, m in events if isinstance(m, CommandAccepted) and m.command_id == "redrive-both"]
    assert ack.subject.startswith("redrove 2 dead letter(s); 1 asked of their owners (claimer 1)")
    assert "1 refused: no owner can redrive them" in ack.subject


async def test_an_answer_naming_no_request_of_ours_is_parked_and_changes_nothing(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    dead_id = await parked_run(dlq, producer, kafka, 8)
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,))),
        command_id="redrive-x",
        source="test",
    )
    [(_, request)] = await read_messages(kafka, kafka.topic(DLQ_REDRIVES), 1)
    assert isinstance(request, RedriveRequested)
    forged = [
        # A guessed request id.
        RedriveOutcome(request_id="0" * 32, dead_letter_id=dead_id, service="claimer", outcome="done"),
        # The genuine request id, answered by another service than the one asked.
        RedriveOutcome(request_id=request.request_id, dead_letter_id=dead_id, service="api", outcome="done"),
    ]
    for outcome in forged:
        envelope = wrap(
            outcome,
            id=redrive_outcome_id(outcome.request_id),
            key=dead_id,
            source=outcome.service,
            occurred_at=AT,
        )
        await producer.send(kafka.topic(DLQ_MESSAGES), envelope)

    async def parked_as_poison() -> bool:
        return await dlq.count("reason = 'unproven_outcome' AND source_service = 'dlq'") == 2

    await assert_eventually(parked_as_poison, timeout=30)
    assert (await status(dlq, dead_id))[0] == "redriving"
    rows = await dlq.pool.fetch("SELECT error FROM dlq.dead_letters WHERE reason = 'unproven_outcome'")
    errors = " | ".join(str(r["error"]) for r in rows)
    assert "no redrive request 00000000000000000000000000000000 was staged by this dlq" in errors
    assert f"redrive request {request.request_id} was asked of the claimer, answered by 'api'" in errors


async def test_every_spelling_of_everything_is_rejected_and_matching_nothing_is_rejected(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    for n in range(3):
        await park(producer, kafka, origin(topic, n, b"{}"), InvalidPayload("x"))

    async def parked() -> bool:
        return await dlq.count() == 3

    await assert_eventually(parked, timeout=30)
    since_1970 = DeadLetterFilter.model_validate({"since": "1970-01-01T00:00:00Z"})
    everything = [DeadLetterFilter(), since_1970, DeadLetterFilter(status="parked")]
    commands: list[RedriveDeadLetters | DiscardDeadLetters] = [
        *(RedriveDeadLetters(selection=s) for s in everything),
        *(DiscardDeadLetters(selection=s, reason="x") for s in everything),
        RedriveDeadLetters(selection=DeadLetterFilter(reason="no-such-reason")),
        DiscardDeadLetters(selection=DeadLetterFilter(ids=("t:0:99",)), reason="x"),
    ]
    for n, command in enumerate(commands):
        await publish_command(producer, kafka, command, command_id=f"c-{n}", source="test")
    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 3 + len(commands))
    rejected = {m.command_id: m.reason for _, m in events if isinstance(m, CommandRejected)}
    assert rejected == {f"c-{n}": EVERYTHING for n in range(6)} | {"c-6": NOTHING, "c-7": NOTHING}
    assert await dlq.count("status = 'parked' AND redrive_count = 0") == 3  # nothing changed

    # Saying so redrives every one (to the ticker, which consumes that topic).
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(), all=True),
        command_id="everything",
        source="test",
    )

    async def all_asked() -> bool:
        return await dlq.count("status = 'redriving' AND redrive_target = 'ticker'") == 3

    await assert_eventually(all_asked, timeout=30)


async def test_discard_marks_a_filtered_set_with_the_reason(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    for n in range(3):
        await park(producer, kafka, origin(topic, n, b"{}"), InvalidPayload("x"))
    await park(producer, kafka, origin(topic, 9, b"\xff"), InvalidPayload("x"), reason="undecodable")

    async def parked() -> bool:
        return await dlq.count() == 4

    await assert_eventually(parked, timeout=30)
    command = DiscardDeadLetters(
        selection=DeadLetterFilter(reason="invalid_payload"), reason="sender fixed; obsolete"
    )
    await publish_command(producer, kafka, command, command_id="discard-1", source="test")

    async def discarded() -> bool:
        return await dlq.count("status = 'discarded'") == 3

    await assert_eventually(discarded, timeout=30)
    assert await dlq.count("status = 'parked' AND reason = 'undecodable'") == 1
    notes = await dlq.pool.fetch("SELECT DISTINCT note FROM dlq.dead_letters WHERE status = 'discarded'")
    assert [r["note"] for r in notes] == ["sender fixed; obsolete"]
    assert dlq.service.metrics.registry.get_sample_value("slotflow_dlq_discards_total") == 3
    # Discarded entries are not redriven by a plain filter.
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(topic=topic)),
        command_id="r-1",
        source="test",
    )

    async def one_asked() -> bool:
        return await dlq.count("status = 'redriving'") == 1

    await assert_eventually(one_asked, timeout=30)
    assert await dlq.count("status = 'discarded'") == 3


async def test_a_truncated_letter_is_redriven_from_its_topic_and_a_keyless_one_too(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    """The letter is only a pointer: its owner reads the record back from its topic, so a letter
    parked without all its bytes is redriven like any other."""
    topic = kafka.topic(SCHEDULE_COMMANDS)
    keyless = origin(topic, 1, b"\xffnot utf-8", key=None)
    await park(producer, kafka, keyless, InvalidPayload("x"), reason="undecodable")
    big = origin(topic, 2, b"x" * 300_000)
    truncated = dead_letter_envelope(
        big, InvalidPayload("x"), source_service="ticker", occurred_at=AT, max_bytes=100_000
    )
    await producer.send(kafka.topic(DLQ_MESSAGES), truncated)

    async def both() -> bool:
        return await dlq.count() == 2

    await assert_eventually(both, timeout=30)
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(topic=topic)),
        command_id="r",
        source="test",
    )
    requests = [m for _, m in await read_messages(kafka, kafka.topic(DLQ_REDRIVES), 2)]
    assert sorted((r.offset, r.kind, r.target) for r in requests if isinstance(r, RedriveRequested)) == [
        (1, "record", "ticker"),
        (2, "record", "ticker"),
    ]


async def test_a_redriven_letter_seen_again_is_parked_again_and_a_runs_next_letter_links_back(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    dead_id = await parked_run(dlq, producer, kafka, 3)

    async def claimer(envelope: Envelope, asked: RedriveRequested) -> Answer:
        return Answer.done("reopened")

    async with owner(kafka, producer, "claimer", claimer):
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,))),
            command_id="r-3",
            source="test",
        )

        async def redriven() -> bool:
            return (await status(dlq, dead_id))[0] == "redriven"

        await assert_eventually(redriven, timeout=30)
    # The reopened run fails again: a new letter, for the run's next JobDue (a new origin), with
    # the redrives the run had; it links to the letter that was redriven.
    again = origin(kafka.topic(JOBS_DUE), 30, job_value(30), key=b"pay")
    letter = dead_letter_envelope(
        again,
        PermanentError("still broken"),
        source_service="claimer",
        occurred_at=AT,
        reason="permanent_error",
        run_id=run_id("pay", AT),
        job_id="pay",
        redrives=1,
    )
    await producer.send(kafka.topic(DLQ_MESSAGES), letter)
    # And the redriven record itself is refused again by a later check: the same origin, seen again.
    await park(
        producer,
        kafka,
        origin(kafka.topic(JOBS_DUE), 3, job_value(3), key=b"pay"),
        PermanentError("refused after the redrive"),
        source="claimer",
        reason="permanent_error",
    )

    async def both() -> bool:
        return (
            await dlq.count("redrive_of = $1", dead_id) == 1 and (await status(dlq, dead_id))[0] == "parked"
        )

    await assert_eventually(both, timeout=30)
    row = await dlq.pool.fetchrow(
        "SELECT id, prior_redrives, status FROM dlq.dead_letters WHERE redrive_of = $1", dead_id
    )
    assert row is not None
    assert (row["id"], row["prior_redrives"], row["status"]) == (again.position, 1, "parked")
    status_, count, note = await status(dlq, dead_id)
    assert (status_, count) == ("parked", 1)
    assert note == "parked again: its record failed again after the redrive"
    reason = await dlq.pool.fetchval("SELECT error FROM dlq.dead_letters WHERE id = $1", dead_id)
    assert "refused after the redrive" in reason
    # The run's next redrive carries the number after both: 1 before, and this letter's own.
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(ids=(again.position,))),
        command_id="r-30",
        source="test",
    )
    requests = [m for _, m in await read_messages(kafka, kafka.topic(DLQ_REDRIVES), 2)]
    numbers = {r.dead_letter_id: r.redrive for r in requests if isinstance(r, RedriveRequested)}
    assert numbers == {dead_id: 1, again.position: 2}
