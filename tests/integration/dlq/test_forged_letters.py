"""Forged dead letters, against a real DLQ service, claimer and ticker (docs/decisions/0009).

A letter is a claim by whoever sent it: any service may write the DLQ topic. A redrive only asks
the owner of the record the letter points at, and the owner acts from its own record, so a letter
that points at a JobDue offset that does not hold what it claims changes nothing: the claimer
refuses to reopen a run from another run's record, refuses a run it never had, reads a genuine
record back as exactly what it is (a completed run's JobDue changes nothing), and a re-issue of a
slot that never fired creates no run. Made-up reasons cannot create metric series either.
"""

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.commands import publish_command
from slotflow.contracts import (
    CommandAccepted,
    CreateSchedule,
    DeadLetterFilter,
    JobDue,
    RedriveDeadLetters,
    ScheduleDefinition,
    SigningKey,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.dlq import KNOWN_REASONS
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_REDRIVES, JOBS_DUE, SIGNING_KEYS
from slotflow.core.identity import run_id
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered, Record
from slotflow.principals import KafkaKeyRing, Signer
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.events import job_due_envelope
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import origin, park, read_messages
from tests.integration.dlq.test_redrive_claimer import claimer_settings
from tests.integration.ticker.support import Replica, send, start_ticker, stop_ticker

SLOT = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
NEVER_FIRED = datetime(2031, 1, 1, 0, 0, tzinfo=UTC)


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    replica = await start_ticker(kafka, pg_dsn)
    yield replica
    await stop_ticker(replica)


async def letter(dlq: Running, dead_letter_id: str) -> tuple[str, str]:
    row = await dlq.pool.fetchrow("SELECT status, note FROM dlq.dead_letters WHERE id = $1", dead_letter_id)
    return (str(row["status"]), str(row["note"])) if row is not None else ("missing", "")


def at(delivered: Delivered, *, offset: int | None = None, value: bytes = b"{}") -> Record:
    """A record a forger's letter claims: where ``delivered`` lies (or another offset of its
    partition), holding ``value``."""
    where = delivered.offset if offset is None else offset
    return Record(delivered.topic, delivered.partition, where, b"k", value, (), None)


async def test_a_forged_letter_pointing_at_another_record_changes_nothing(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str, ticker: Replica
) -> None:
    calls: list[str] = []

    async def pay(ctx: RunContext) -> str:
        calls.append(ctx.run_id)
        return "paid"

    registry = HandlerRegistry()
    registry.register("payouts.pay", pay)
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
    await claimer.start()
    try:
        # Two genuine runs that completed, and a genuine one dead-lettered (a typo'd handler).
        paid = JobDue(run_id=run_id("payouts", SLOT), job_id="payouts", slot=SLOT, handler="payouts.pay")
        paid_at = await producer.send(kafka.topic(JOBS_DUE), job_due_envelope(paid, at=SLOT))
        later = SLOT.replace(hour=1)
        paid2 = JobDue(run_id=run_id("payouts", later), job_id="payouts", slot=later, handler="payouts.pay")
        paid2_at = await producer.send(kafka.topic(JOBS_DUE), job_due_envelope(paid2, at=later))
        dead = JobDue(run_id=run_id("refunds", SLOT), job_id="refunds", slot=SLOT, handler="refunds.typo")
        dead_at = await producer.send(kafka.topic(JOBS_DUE), job_due_envelope(dead, at=SLOT))

        async def settled() -> bool:
            rows = await dlq.pool.fetch("SELECT run_id, state FROM claimer.runs")
            states = {r["run_id"]: r["state"] for r in rows}
            return states == {
                paid.run_id: "completed",
                paid2.run_id: "completed",
                dead.run_id: "dead_lettered",
            }

        await assert_eventually(settled, timeout=30, message="two runs completed, one dead-lettered")
        assert sorted(calls) == sorted([paid.run_id, paid2.run_id])
        # Forged letters, each claiming what the record at its position is not:
        # (1) the dead run's letter, pointing at a completed run's JobDue;
        other_run = at(paid_at)
        await park(
            producer,
            kafka,
            other_run,
            PermanentError("x"),
            source="claimer",
            reason="unknown_handler",
            run_id=dead.run_id,
            job_id="refunds",
        )
        # (2) a run the claimer never had (a slot that never fired), at an offset nothing was written to;
        never_run = run_id("payouts", NEVER_FIRED)
        never_job = JobDue(run_id=never_run, job_id="payouts", slot=NEVER_FIRED, handler="payouts.pay")
        never = at(dead_at, offset=dead_at.offset + 1000, value=encode(job_due_envelope(never_job, at=SLOT)))
        await park(
            producer,
            kafka,
            never,
            PermanentError("x"),
            source="claimer",
            reason="attempts_exhausted",
            run_id=never_run,
            job_id="payouts",
        )
        # (3) "poison" that is a completed run's genuine JobDue: read back, it is just that.
        genuine = at(paid2_at)
        await park(producer, kafka, genuine, PermanentError("x"), source="claimer", reason="invalid_payload")
        ids = [other_run.position, never.position, genuine.position]

        async def parked() -> bool:
            return await dlq.count("id = ANY($1::text[])", ids) == 3

        await assert_eventually(parked, timeout=30)
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=tuple(ids))),
            command_id="redrive-forged",
            source="test",
        )

        async def answered() -> bool:
            statuses = [(await letter(dlq, i))[0] for i in ids]
            return all(status in ("redriven", "redrive_failed") for status in statuses)

        await assert_eventually(answered, timeout=30, message="the claimer answered each forged letter")
        status, note = await letter(dlq, other_run.position)
        assert status == "redrive_failed"
        assert (
            f"the letter points at {other_run.position}, but run '{dead.run_id}' was dead-lettered from the "
            f"JobDue at {dead_at.topic}:{dead_at.partition}:{dead_at.offset}"
        ) in note
        status, note = await letter(dlq, never.position)
        assert status == "redrive_failed"
        assert f"no run '{never_run}' at the claimer" in note
        status, note = await letter(dlq, genuine.position)
        assert status == "redriven"
        assert f"read {genuine.position} back; it changed nothing" in note

        # (4) the never-fired slot, re-issued from its schedule's current definition by the ticker:
        # the claimer never creates a run for a redrive's JobDue.
        definition = ScheduleDefinition.model_validate(
            {"spec": {"kind": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"}, "handler": "payouts.pay"}
        )
        await send(producer, kafka, CreateSchedule(schedule_id="payouts", definition=definition, paused=True))

        async def created() -> bool:
            found = await dlq.pool.fetchval(
                "SELECT count(*) FROM ticker.schedules WHERE schedule_id = 'payouts'"
            )
            return bool(found)

        await assert_eventually(created, timeout=30)
        duplicates = claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total")
        current = RedriveDeadLetters(
            selection=DeadLetterFilter(ids=(never.position,), status="redrive_failed"), definition="current"
        )
        await publish_command(producer, kafka, current, command_id="redrive-forged-current", source="test")

        async def dropped() -> bool:
            return claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total") > duplicates

        await assert_eventually(
            dropped, timeout=30, message="the re-issue reached the claimer and was dropped"
        )
        assert await dlq.pool.fetchval("SELECT count(*) FROM claimer.runs WHERE run_id = $1", never_run) == 0
        # Nothing ran that had not run: each completed run once, the dead one not at all.
        assert sorted(calls) == sorted([paid.run_id, paid2.run_id])
        state = await dlq.pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", dead.run_id)
        assert state == "dead_lettered"
    finally:
        await claimer.stop(grace=0.5)


async def test_forged_reasons_do_not_create_metric_series(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(JOBS_DUE)
    for n in range(30):
        record = origin(topic, 100 + n, b"x", key=b"k")
        await park(producer, kafka, record, PermanentError("x"), source="claimer", reason=f"forged-{n}")

    async def parked() -> bool:
        return await dlq.count() == 30

    await assert_eventually(parked, timeout=30, message="30 letters parked")
    registry = dlq.service.metrics.registry

    async def gauged() -> bool:
        return registry.get_sample_value("slotflow_dlq_parked_entries", {"reason": "other"}) == 30

    await assert_eventually(gauged, timeout=10, message="the gauge folded them into other")
    labels = {
        sample.labels["reason"]
        for metric in registry.collect()
        if metric.name in ("slotflow_dlq_parked", "slotflow_dlq_parked_entries")
        for sample in metric.samples
        if "reason" in sample.labels
    }
    assert labels <= KNOWN_REASONS | {"other"}
    assert registry.get_sample_value("slotflow_dlq_parked_total", {"reason": "other"}) == 30


async def test_a_letter_naming_the_keys_topic_is_never_redriven_there(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    """Only the api writes the keys topic: a letter that names it (no consumer parks its records)
    is forged, and a redrive of it would have the dlq write a signing key nobody registered."""
    keys_topic = kafka.topic(SIGNING_KEYS)
    attacker = Signer(Ed25519PrivateKey.generate(), "key:ops-admin")
    key = SigningKey(
        key_id=attacker.key_id,
        name="ops-admin",
        principal=attacker.principal,
        scope="admin",
        public_key=attacker.public_key,
        created_at=datetime.now(UTC),
    )
    value = encode(
        wrap(key, id=f"{key.key_id}/registered", key=key.key_id, source="api", occurred_at=key.created_at)
    )
    forged = origin(keys_topic, 0, value, key=key.key_id.encode())
    # Sent as from the claimer, which does read the keys topic (its keyring) and takes redrive
    # requests: a route by the letter's claims alone would ask it to read the key record back.
    await park(producer, kafka, forged, PermanentError("x"), source="claimer", reason="permanent_error")
    await assert_eventually(lambda: dlq.count("id = $1", forged.position), timeout=30, message="parked")
    command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(forged.position,)))
    await publish_command(producer, kafka, command, command_id="redrive-keys", source="test")

    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 3)
    [ack] = [m for _, m in events if isinstance(m, CommandAccepted)]
    assert "1 refused" in ack.subject
    status, note = await letter(dlq, forged.position)
    assert status == "redrive_failed"
    assert "the keys topic" in note
    # Refused by the dlq itself: no owner was asked, nothing was staged for the redrive topic.
    requests = await dlq.pool.fetch(
        "SELECT target, outcome FROM dlq.redrive_requests WHERE dead_letter_id = $1", forged.position
    )
    assert [(r["target"], r["outcome"]) for r in requests] == [("dlq", "refused")]
    staged = await dlq.pool.fetchval(
        "SELECT count(*) FROM dlq.outbox WHERE topic = $1", kafka.topic(DLQ_REDRIVES)
    )
    assert staged == 0
    # Nothing reached the keys topic: a service reading it knows no key.
    ring = KafkaKeyRing(kafka, client_id="test")
    await ring.start()
    try:
        assert len(ring) == 0
    finally:
        await ring.stop()
