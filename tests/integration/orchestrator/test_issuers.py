"""Outcomes and timer firings checked against their issuer (slotflow.issuers), as a hostile client
with write access to the runs and timers topics, on the real broker and database.

Forged RunCompleted records (another run id; the right run id with guessed integers and a forged
result) leave the workflow untouched, are parked in the DLQ with their reason, and the claimer's
genuine result is the one the workflow records. Forged TimerFired records (an execution timeout
the workflow never set, a deadline its activity never had, a sleep's firing under another timer
id, and a genuine sleep's firing before its time) are parked with their reason, and each workflow
carries on to its end: the sleep ends when the ticker fires it, not before.
"""

import base64
import json
from datetime import UTC, datetime
from typing import Any

from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    DeadLettered,
    Envelope,
    Message,
    RunCompleted,
    SignalWorkflow,
    StartWorkflow,
    TimerFired,
    TimerStarted,
    WorkflowCompleted,
    WorkflowTimerFired,
    wrap,
)
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.topics import DLQ_MESSAGES, RUN_EVENTS, TIMER_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_claimer.app import migrate as claimer_migrate
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.app import apply_migrations as orchestrator_migrate
from slotflow_orchestrator.deciding import Decisions
from slotflow_orchestrator.intake import shard_of
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.sql import RECORD_INPUTS
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import Running, Workflows, history, wait_history
from tests.integration.ticker.support import Replica

NOW = datetime.now(UTC)


def forged_completion(
    workflow_id: str,
    sequence: int,
    *,
    run_id: str,
    fence: int,
    attempt: int,
    result: Any,
    envelope_id: str | None = None,
) -> Envelope:
    """A RunCompleted as anyone who may write the runs topic can make it; its envelope id follows
    the identity rule (`{run_id}/{fence}/...`), so it passes every check a consumer makes at decode."""
    done = RunCompleted(
        run_id=run_id,
        job_id=workflow_id,
        slot=NOW,
        attempt=attempt,
        fence_token=fence,
        owner="attacker",
        workflow_id=workflow_id,
        sequence=sequence,
        result=result,
        started_at=NOW,
        finished_at=NOW,
    )
    return wrap(
        done,
        id=envelope_id or f"{run_id}/{fence}/{unique_name('forged')}",
        key=workflow_id,
        source="claimer",
        occurred_at=NOW,
    )


def forged_firing(
    workflow_id: str, timer_id: str, sequence: int | None, *, envelope_id: str | None = None
) -> Envelope:
    fired: Message = TimerFired(
        timer_id=timer_id, owner=workflow_id, sequence=sequence, fire_at=NOW, fired_at=NOW
    )
    return wrap(
        fired,
        id=envelope_id or f"timer:{timer_id}:{unique_name('forged')}",
        key=workflow_id,
        source="ticker",
        occurred_at=NOW,
    )


def refused(service: OrchestratorService, reason: str, rule: str) -> float:
    value = service.metrics.registry.get_sample_value(
        "slotflow_orchestrator_refused_inputs_total", {"reason": reason, "rule": rule}
    )
    return value or 0.0


async def parked(
    kafka: KafkaSettings, sent: dict[str, tuple[Delivered, Envelope]]
) -> dict[str, DeadLettered]:
    """The dead letters of the records ``sent`` (by name), once every one is on the DLQ topic."""
    positions = {(d.topic, d.partition, d.offset): name for name, (d, _) in sent.items()}
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:

        async def probe() -> dict[str, DeadLettered] | None:
            await dlq.drain()
            letters = {}
            for envelope in dlq.of_type(DeadLettered.message_type):
                letter = DeadLettered.model_validate(envelope.data)
                name = positions.get((letter.topic, letter.partition, letter.offset))
                if name is not None:
                    letters[name] = letter
            return letters if len(letters) == len(sent) else None

        found: dict[str, DeadLettered] = await assert_eventually(
            probe, timeout=30, message=f"{len(sent)} refused records parked in the DLQ"
        )
    for name, letter in found.items():
        # The very record: a redrive sends the same bytes back.
        assert base64.b64decode(letter.value_b64) == encode(sent[name][1]), name
        assert letter.source_service == "orchestrator"
    return found


async def pending_activity(db: Pool, workflow_id: str) -> ActivityScheduled:
    events = await wait_history(db, workflow_id, ActivityScheduled.message_type)
    scheduled = events[-1]
    assert isinstance(scheduled, ActivityScheduled)
    return scheduled


async def test_forged_activity_outcomes_leave_the_workflow_untouched_and_the_genuine_result_wins(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    runs_topic = kafka.topic(RUN_EVENTS)
    wf = unique_name("victim")
    # The claimer's schema as a deployment has it (its runs table is what backs an outcome); the
    # claimer itself starts later.
    await claimer_migrate(db)
    first = await start_orchestrator_()
    workflows = Workflows(kafka, producer, db)
    await workflows.start(wf, "tests.approval", {"order_id": wf}, f"start-{wf}")
    await workflows.send(SignalWorkflow(workflow_id=wf, signal="approve", payload={"by": "ops"}), f"sig-{wf}")
    # No claimer yet: the authorization stays pending, its run unclaimed.
    scheduled = await pending_activity(db, wf)
    sequence, run_id = scheduled.sequence, scheduled.run_id
    before = await history(db, wf)
    forged = {"authorization": "forged", "pay_to": "attacker"}

    # Finding 1 as reported: another run id, a fence and an owner of the attacker's choosing. And
    # the right run id with the integers the claimer's first claim will have, under the envelope id
    # its genuine RunCompleted will have: while the claimer holds no record, nothing backs it.
    sent = {
        "attacker-run": await producer.send(
            runs_topic,
            first_attacker := forged_completion(
                wf, sequence, run_id="attacker-run", fence=999, attempt=1, result=forged
            ),
        ),
        "unclaimed": await producer.send(
            runs_topic,
            unclaimed := forged_completion(
                wf,
                sequence,
                run_id=run_id,
                fence=1,
                attempt=1,
                result=forged,
                envelope_id=f"{run_id}/1/completed",
            ),
        ),
    }

    async def both_refused() -> bool:
        service = first.orchestrator
        return (
            refused(service, "unproven_outcome", "run_id") == 1
            and refused(service, "unproven_outcome", "no_record") == 1
        )

    await assert_eventually(both_refused, timeout=30, message="both forged outcomes refused")
    assert await history(db, wf) == before
    letters = await parked(
        kafka,
        {"attacker-run": (sent["attacker-run"], first_attacker), "unclaimed": (sent["unclaimed"], unclaimed)},
    )
    assert letters["attacker-run"].reason == "unproven_outcome"
    assert (
        f"names run 'attacker-run', but the activity pending at '{wf}' sequence {sequence} is run '{run_id}'"
        in (letters["attacker-run"].error)
    )
    assert letters["attacker-run"].run_id == "attacker-run"
    assert f"the claimer holds no record of run '{run_id}'" in letters["unclaimed"].error

    # With the orchestrator down, a wrong guess and a right one (both forged results) land on the
    # topic, then the claimer runs the activity: its genuine RunCompleted comes after them.
    await first.stop()
    wrong = forged_completion(wf, sequence, run_id=run_id, fence=7, attempt=3, result=forged)
    right = forged_completion(wf, sequence, run_id=run_id, fence=1, attempt=1, result=forged)
    wrong_sent = await producer.send(runs_topic, wrong)
    await producer.send(runs_topic, right)
    await start_claimer()

    async def claimer_completed() -> dict[str, Any] | None:
        row = await db.fetchrow(
            "SELECT state, fence_token, attempt, result::text AS result FROM claimer.runs WHERE run_id = $1",
            run_id,
        )
        return dict(row) if row is not None and row["state"] == "completed" else None

    claimer_row = await assert_eventually(
        claimer_completed, timeout=60, message="the claimer completed the run"
    )
    assert (claimer_row["fence_token"], claimer_row["attempt"]) == (1, 1)

    second = await start_orchestrator_()
    events = await wait_history(db, wf, WorkflowCompleted.message_type)
    [done] = [e for e in events if isinstance(e, ActivityCompleted)]
    genuine = {"order_id": wf, "authorization": f"auth-{run_id}"}
    # The right integers were accepted (the record backs them), with the record's result: the
    # forged one is nowhere, and the genuine RunCompleted that followed found nothing pending.
    assert done.result == genuine
    assert done.result == json.loads(claimer_row["result"])
    end = events[-1]
    assert isinstance(end, WorkflowCompleted)
    assert end.result == {"approved_by": "ops", **genuine}
    assert "forged" not in str([e.model_dump() for e in events])
    assert refused(second.orchestrator, "unproven_outcome", "fence") == 1
    letter = (await parked(kafka, {"wrong": (wrong_sent, wrong)}))["wrong"]
    assert (
        f"run.completed does not match the claimer's record of run '{run_id}': fence 7, recorded 1; "
        "attempt 3, recorded 1"
    ) in letter.error
    # The activity ran once.
    assert await workflows.effects(wf) == ["payments.authorize"]


async def test_forged_timer_firings_are_parked_and_each_workflow_carries_on(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
    ticker: Replica,
) -> None:
    timers_topic = kafka.topic(TIMER_EVENTS)
    running: Running = await start_orchestrator_()
    workflows = Workflows(kafka, producer, db)
    # A workflow without an execution timeout, its activity without a deadline (no claimer yet).
    approval = unique_name("approval")
    await workflows.start(approval, "tests.approval", {"order_id": approval}, f"start-{approval}")
    await workflows.send(
        SignalWorkflow(workflow_id=approval, signal="approve", payload={"by": "ops"}), f"sig-{approval}"
    )
    scheduled = await pending_activity(db, approval)
    # A workflow sleeping 8 s through the ticker.
    sleeper = unique_name("sleeper")
    await workflows.start(sleeper, "tests.sleeper", {"order_id": sleeper, "seconds": 8}, f"start-{sleeper}")
    [_, sleep] = await wait_history(db, sleeper, TimerStarted.message_type)
    assert isinstance(sleep, TimerStarted)
    before = {w: await history(db, w) for w in (approval, sleeper)}

    records = {
        "execution-timeout": forged_firing(approval, f"{approval}#execution-timeout", None),
        "deadline": forged_firing(approval, f"{scheduled.run_id}#deadline", scheduled.sequence),
        "other-timer": forged_firing(sleeper, f"{sleeper}/timer/99", sleep.sequence),
        # The genuine timer's id and the genuine record's envelope id, before its time.
        "early": forged_firing(
            sleeper, sleep.timer_id, sleep.sequence, envelope_id=f"timer:{sleep.timer_id}"
        ),
    }
    sent = {
        name: (await producer.send(timers_topic, envelope), envelope) for name, envelope in records.items()
    }

    async def all_refused() -> bool:
        service = running.orchestrator
        return (
            refused(service, "unproven_timer", "not_started") == 2
            and refused(service, "unproven_timer", "timer_id") == 1
            and refused(service, "unproven_timer", "early") == 1
        )

    await assert_eventually(all_refused, timeout=30, message="four forged firings refused")
    assert {w: await history(db, w) for w in (approval, sleeper)} == before
    letters = await parked(kafka, sent)
    assert {letter.reason for letter in letters.values()} == {"unproven_timer"}
    assert (
        f"the execution timeout of workflow {approval} started no such timer"
        in letters["execution-timeout"].error
    )
    assert "the schedule-to-close deadline of activity payments.authorize" in letters["deadline"].error
    assert "started no such timer" in letters["deadline"].error
    assert (
        f"TimerFired '{sleeper}/timer/99' is not the timer the timer started at sequence {sleep.sequence} of "
        f"workflow {sleeper} waits on ('{sleep.timer_id}')"
    ) in letters["other-timer"].error
    assert f"before its time: the timer started at sequence {sleep.sequence}" in letters["early"].error
    assert sleep.fire_at.isoformat() in letters["early"].error

    # Both carry on: the activity completes once a claimer runs it, the sleep ends when the ticker
    # fires it (the same envelope id as the early forgery: still taken), not before its time.
    await start_claimer()
    approved = await wait_history(db, approval, WorkflowCompleted.message_type)
    assert [e.message_type for e in approved[len(before[approval]) :]] == [
        "workflow.activity_completed",
        "workflow.completed",
    ]
    slept = await wait_history(db, sleeper, WorkflowCompleted.message_type, timeout=60)
    [woke] = [e for e in slept if isinstance(e, WorkflowTimerFired)]
    assert woke.timer_id == sleep.timer_id
    # fired_at is the ticker's database clock when it fired: never before the sleep's fire_at.
    assert woke.fired_at >= sleep.fire_at


async def test_outcomes_and_firings_that_answer_nothing_pending_are_parked_unless_their_issuer_backs_them(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
    ticker: Replica,
) -> None:
    """Found by the system suite's hostile actor: a forged outcome or firing that reached the
    orchestrator after what it names had been answered (or for a sequence that never held it, or a
    workflow that had ended) was dropped without a trace. Now only a record its issuer's record
    backs is dropped (a copy of a genuine one changes nothing); every other one is parked."""
    running: Running = await start_orchestrator_()
    await start_claimer()
    workflows = Workflows(kafka, producer, db)
    approval = unique_name("approval")
    await workflows.start(approval, "tests.approval", {"order_id": approval}, f"start-{approval}")
    await workflows.send(
        SignalWorkflow(workflow_id=approval, signal="approve", payload={"by": "ops"}), f"sig-{approval}"
    )
    sleeper = unique_name("sleeper")
    await workflows.start(sleeper, "tests.sleeper", {"order_id": sleeper, "seconds": 1}, f"start-{sleeper}")
    approved = await wait_history(db, approval, WorkflowCompleted.message_type, timeout=60)
    slept = await wait_history(db, sleeper, WorkflowCompleted.message_type, timeout=60)
    [scheduled] = [e for e in approved if isinstance(e, ActivityScheduled)]
    [sleep] = [e for e in slept if isinstance(e, TimerStarted)]
    row = await db.fetchrow(
        "SELECT fence_token, attempt FROM claimer.runs WHERE run_id = $1", scheduled.run_id
    )
    assert row is not None
    fence, attempt = row["fence_token"], row["attempt"]
    forged = {"forged": True, "pay_to": "attacker"}
    runs_topic, timers_topic = kafka.topic(RUN_EVENTS), kafka.topic(TIMER_EVENTS)
    seq = scheduled.sequence
    # Each key's copies go first: by the time the forged records after them are parked, the copies
    # (same partition, decided in order) have been decided too.
    copies = {
        "backed outcome copy": (
            runs_topic,
            forged_completion(
                approval,
                seq,
                run_id=scheduled.run_id,
                fence=fence,
                attempt=attempt,
                result=forged,
                envelope_id=f"{scheduled.run_id}/{fence}/copy",
            ),
        ),
        "due firing copy": (
            timers_topic,
            forged_firing(
                sleeper, sleep.timer_id, sleep.sequence, envelope_id=f"timer:{sleep.timer_id}:copy"
            ),
        ),
    }
    unbacked = {
        "answered, wrong fence": (
            runs_topic,
            forged_completion(approval, seq, run_id=scheduled.run_id, fence=999, attempt=1, result=forged),
        ),
        "no activity at that sequence": (
            runs_topic,
            forged_completion(
                approval, seq + 50, run_id=f"{approval}/{seq + 50}", fence=1, attempt=1, result=forged
            ),
        ),
        "another workflow's timer id": (
            timers_topic,
            forged_firing(sleeper, f"{approval}/timer/{sleep.sequence}", sleep.sequence),
        ),
        "an execution timeout never set": (
            timers_topic,
            forged_firing(sleeper, f"{sleeper}#execution-timeout", None),
        ),
    }
    before = {w: await history(db, w) for w in (approval, sleeper)}
    sent = {}
    for name, (topic, envelope) in {**copies, **unbacked}.items():
        sent[name] = (await producer.send(topic, envelope), envelope)

    letters = await parked(kafka, {name: sent[name] for name in unbacked})
    assert letters["answered, wrong fence"].reason == "unproven_outcome"
    assert "fence 999, recorded" in letters["answered, wrong fence"].error
    assert letters["no activity at that sequence"].reason == "unproven_outcome"
    assert f"sequence {seq + 50} of workflow {approval}, where no activity was scheduled" in (
        letters["no activity at that sequence"].error
    )
    assert letters["another workflow's timer id"].reason == "unproven_timer"
    assert f"is not the timer the timer started at sequence {sleep.sequence} of workflow {sleeper}" in (
        letters["another workflow's timer id"].error
    )
    assert letters["an execution timeout never set"].reason == "unproven_timer"
    assert "started no such timer" in letters["an execution timeout never set"].error
    service = running.orchestrator
    assert refused(service, "unproven_outcome", "fence") == 1
    assert refused(service, "unproven_outcome", "run_id") == 1
    assert refused(service, "unproven_timer", "timer_id") == 1
    assert refused(service, "unproven_timer", "not_started") == 1
    # The copies their issuers back are dropped (nothing parked for them), and nothing changed.
    positions = {(d.topic, d.partition, d.offset) for name, (d, _) in sent.items() if name in copies}
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        await dlq.drain()
        origins = {
            (letter.topic, letter.partition, letter.offset)
            for letter in (
                DeadLettered.model_validate(e.data) for e in dlq.of_type(DeadLettered.message_type)
            )
        }
    assert not positions & origins
    assert {w: await history(db, w) for w in (approval, sleeper)} == before


async def test_an_input_recorded_before_origins_were_kept_is_parked_under_its_input_and_forgotten(
    pg_pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings
) -> None:
    """An outcome recorded by an orchestrator of the previous version (no origin, an inbox id
    without a digest) and refused: its letter names the input (partition -1, its seq) and carries
    its stored bytes, and its inbox id is forgotten in the same transaction."""
    await orchestrator_migrate(pg_pool)
    await claimer_migrate(pg_pool)
    shards = 3
    wf = "legacy-1"
    shard = shard_of(wf, shards)
    leases = Leases(pg_pool, schema="orchestrator", owner="one")
    await leases.reconcile(frozenset({shard}), 1)
    decisions = Decisions(
        pg_pool,
        schema="orchestrator",
        workflow_code=workflow_code,
        outbound=Outbound(kafka),
        metrics=OrchestratorMetrics(),
        shards=shards,
    )
    start = wrap(
        StartWorkflow(workflow_id=wf, workflow_type="tests.checkout", input={"order_id": wf}),
        id=f"start-{wf}",
        key=wf,
        source="test",
        occurred_at=NOW,
    )
    forged = forged_completion(wf, 2, run_id=f"{wf}/2", fence=3, attempt=1, result={"forged": True})
    runs_topic = kafka.topic(RUN_EVENTS)
    await pg_pool.execute(
        "INSERT INTO orchestrator.inbox (event_id, topic) VALUES ($1, $2)",
        f"{runs_topic}:{forged.id}",
        runs_topic,
    )
    for envelope in (start, forged):
        await pg_pool.execute(
            sql(RECORD_INPUTS, "orchestrator"), [wf], [shard], [envelope.type], [encode(envelope)]
        )
        await decisions.decide(wf, shard=shard, token=leases.held[shard])

    assert [e.message_type for e in await history(pg_pool, wf)] == [
        "workflow.started",
        "workflow.activity_scheduled",
    ]
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inbox") == 0
    value = await pg_pool.fetchval(
        "SELECT value FROM orchestrator.outbox WHERE topic = $1", kafka.topic(DLQ_MESSAGES)
    )
    letter = DeadLettered.model_validate(decode(value).data)
    assert (letter.reason, letter.topic, letter.partition) == ("unproven_outcome", runs_topic, -1)
    assert base64.b64decode(letter.value_b64) == encode(forged)
    assert f"the claimer holds no record of run '{wf}/2'" in letter.error
