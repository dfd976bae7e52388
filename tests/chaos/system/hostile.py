"""The whole-system fault suite's hostile actor: a client with plain write access to the topics.

It writes straight to Kafka, beside the machine faults, what docs/security.md's threat model says
a holder of such access can write, and nothing it could not: forged activity outcomes (RunCompleted,
RunDeadLettered) and timer firings (TimerFired) for the workload's real workflows, timer commands
on the public schedule-command topic and on the internal one, commands whose principal is forged
(signatures are required in the suite: see `System`), and records no service can store (a NUL,
nesting past the limit, `NaN`). It does not write the keys topic (only the api may: the ACL, tested
by tests/integration/security/test_kafka_sasl.py) nor jobs.due (a forged JobDue with a genuine run id
runs by design: docs/security.md, "What each consumer believes").

The plan is seeded like the fault plan (its own random stream, so no fault of a seed moves): the
same seed gives the same acts at the same offsets. Which workflow an act aims at is the one
pending at that moment (read from the history topic as the run goes), so the targets follow the
run. Every record it writes is remembered with its position and command id, for the checker: each
must be refused (CommandRejected) or parked (a dead letter at its position), and none applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.contracts import (
    CancelTimer,
    CancelWorkflow,
    CreateSchedule,
    CronSpec,
    Envelope,
    Message,
    RunCompleted,
    RunDeadLettered,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    TimerFired,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.contracts.runs import JobDue
from slotflow.contracts.timers import FireJobDue, StartTimer, retry_timer_id
from slotflow.contracts.topics import (
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
)
from slotflow.core.identity import run_id as slot_run_id
from slotflow.kafka.producer import Producer
from slotflow.principals import Signer
from slotflow.settings import KafkaSettings
from tests.chaos.system.checker import FORGED_MARKER, HOSTILE_PREFIX, HostileRecord, TimerUnderTest
from tests.chaos.system.harness import PARTITIONS

#: What the actor does, one kind per act (each act writes a few records of that kind).
HOSTILE_KINDS = (
    "forged_outcome",
    "forged_timer",
    "timer_command",
    "forged_principal",
    "unacceptable",
)
#: The payload the attacker wants a handler to run with: recognisable wherever it lands.
ATTACKER_PAYLOAD = {"to": "attacker", "kind": HOSTILE_PREFIX + "payout"}
#: How long an act waits for a pending activity or a waiting sleep to aim at before it takes the
#: latest seen (the short profile's sagas run for seconds only).
TARGET_WAIT_S = 4.0
#: Nesting past the acceptance rule's limit (99 levels: slotflow.contracts.acceptance).
TOO_DEEP = 150


@dataclass(frozen=True)
class HostileAct:
    at_s: float
    kind: str

    def __str__(self) -> str:
        return f"t+{self.at_s:6.1f}s hostile {self.kind}"


def hostile_plan(seed: int, count: int, duration_s: float) -> list[HostileAct]:
    """The seeded plan: ``count`` acts through the first 85 % of the run (as the faults), every
    kind in turn in a seeded order, so even the short profile sends each kind at least once."""
    rng = random.Random(seed * 2_147_483_647 + 61)
    kinds = list(HOSTILE_KINDS)
    rng.shuffle(kinds)
    span = duration_s * 0.85
    acts = []
    for i in range(count):
        at = 1 + span * (i + rng.random() * 0.5) / max(count, 1)
        acts.append(HostileAct(round(at, 1), kinds[i % len(kinds)]))
    return acts


@dataclass(frozen=True)
class PendingActivity:
    workflow_id: str
    sequence: int
    run_id: str


@dataclass(frozen=True)
class Sleep:
    workflow_id: str
    sequence: int
    timer_id: str
    fire_at: datetime


@dataclass
class Watch:
    """The workload's workflows as the history topic shows them, followed as the run goes: which
    activities are pending and which sleeps are waiting (the actor's targets)."""

    activities: dict[str, PendingActivity] = field(default_factory=dict)
    sleeps: dict[tuple[str, int], Sleep] = field(default_factory=dict)
    #: The latest seen, pending or not: a target when nothing is pending at the act's moment.
    last_activity: PendingActivity | None = None
    last_sleep: Sleep | None = None
    running: set[str] = field(default_factory=set)

    def see(self, envelope: dict[str, Any]) -> None:
        data = envelope.get("data", {})
        kind = envelope.get("type")
        workflow_id = str(data.get("workflow_id", ""))
        if kind == "workflow.started":
            self.running.add(workflow_id)
        elif kind in ("workflow.completed", "workflow.failed", "workflow.cancelled"):
            self.running.discard(workflow_id)
        elif kind == "workflow.activity_scheduled":
            activity = PendingActivity(workflow_id, int(data["sequence"]), str(data["run_id"]))
            self.activities[activity.run_id] = activity
            self.last_activity = activity
        elif kind in ("workflow.activity_completed", "workflow.activity_failed"):
            run = f"{workflow_id}/{data.get('scheduled_sequence')}"
            self.activities.pop(run, None)
        elif kind == "workflow.timer_started":
            sleep = Sleep(
                workflow_id,
                int(data["sequence"]),
                str(data["timer_id"]),
                datetime.fromisoformat(str(data["fire_at"])),
            )
            self.sleeps[(workflow_id, sleep.sequence)] = sleep
            self.last_sleep = sleep
        elif kind == "workflow.timer_fired":
            self.sleeps.pop((workflow_id, int(data.get("started_sequence", 0))), None)


class HostileActor:
    """Writes the plan's records as a client with plain topic access (see the module docstring)."""

    def __init__(
        self,
        seed: int,
        kafka: KafkaSettings,
        *,
        registered: Signer,
        genuine: Signer,
        timers: Sequence[TimerUnderTest] = (),
    ) -> None:
        self.rng = random.Random(seed * 2_147_483_647 + 67)
        self.kafka = kafka
        #: The insider: a key registered for `key:mallory` with the `operate` scope.
        self.registered = registered
        #: The workload's own signer: only to copy a genuine signed command and alter it.
        self.genuine = genuine
        #: The workload's durable timers (filled before the first act): a forged cancel aims at one.
        self.timers = timers
        #: A key nobody registered.
        self.unregistered = Signer(Ed25519PrivateKey.generate(), "key:mallory")
        self.watch = Watch()
        self.records: list[HostileRecord] = []
        self.acts = 0
        self._tail: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    # ---- following the history topic -------------------------------------------------------

    async def start(self) -> None:
        self._tail = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        self._stop.set()
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tail

    async def _follow(self) -> None:
        topic = self.kafka.topic(WORKFLOW_HISTORY)
        while not self._stop.is_set():
            consumer = AIOKafkaConsumer(bootstrap_servers=self.kafka.bootstrap, enable_auto_commit=False)
            try:
                await consumer.start()
                # As the harness made the topic (a consumer without a subscription knows no
                # partitions of it yet).
                count = min(WORKFLOW_HISTORY.partitions, PARTITIONS)
                parts = [TopicPartition(topic, p) for p in range(count)]
                consumer.assign(parts)
                await consumer.seek_to_beginning(*parts)
                self.watch = Watch()
                while not self._stop.is_set():
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        for record in records:
                            try:
                                self.watch.see(json.loads(record.value or b"{}"))
                            except (ValueError, KeyError, TypeError):
                                continue
            except Exception:  # noqa: BLE001 - the broker restarts under the suite: read it all again
                await asyncio.sleep(1.0)
            finally:
                await consumer.stop()

    # ---- the acts ---------------------------------------------------------------------------

    async def act(self, producer: Producer, kind: str) -> int:
        """Write one act's records; how many it wrote (acts run concurrently: each counts its own)."""
        self.acts += 1
        n = self.acts
        if kind == "forged_outcome":
            await self._forged_outcomes(producer, n)
        elif kind == "forged_timer":
            await self._forged_timers(producer, n)
        elif kind == "timer_command":
            await self._timer_commands(producer, n)
        elif kind == "forged_principal":
            await self._forged_principals(producer, n)
        elif kind == "unacceptable":
            await self._unacceptable(producer, n)
        else:
            raise ValueError(f"unknown hostile act {kind}")
        return sum(1 for record in self.records if record.act == n)

    async def _activity(self) -> tuple[PendingActivity | None, bool]:
        """A pending activity (whether one was): activities finish within a second, so the actor
        waits up to TARGET_WAIT_S for one to be scheduled, then takes the latest seen."""
        deadline = asyncio.get_running_loop().time() + TARGET_WAIT_S
        while True:
            pending = sorted(self.watch.activities.values(), key=lambda a: a.run_id)
            if pending:
                return self.rng.choice(pending), True
            if asyncio.get_running_loop().time() > deadline:
                return self.watch.last_activity, False
            await asyncio.sleep(0.02)

    async def _sleep(self) -> tuple[Sleep | None, bool]:
        """A sleep still before its fire_at (whether one was), waiting for one as `_activity`."""
        deadline = asyncio.get_running_loop().time() + TARGET_WAIT_S
        while True:
            now = datetime.now(UTC)
            waiting = sorted(
                (s for s in self.watch.sleeps.values() if s.fire_at > now + timedelta(milliseconds=200)),
                key=lambda s: (s.workflow_id, s.sequence),
            )
            if waiting:
                return self.rng.choice(waiting), True
            if asyncio.get_running_loop().time() > deadline:
                return self.watch.last_sleep, False
            await asyncio.sleep(0.02)

    async def _send(
        self,
        producer: Producer,
        act: int,
        kind: str,
        variant: str,
        topic: str,
        envelope: Envelope,
        *,
        command_id: str | None = None,
        target: str = "",
        true_from: datetime | None = None,
    ) -> None:
        delivered = await producer.send(topic, envelope)
        self.records.append(
            HostileRecord(
                kind,
                variant,
                topic,
                delivered.partition,
                delivered.offset,
                command_id,
                target,
                act,
                true_from,
            )
        )

    async def _send_raw(
        self,
        producer: Producer,
        act: int,
        kind: str,
        variant: str,
        topic: str,
        envelope: Envelope,
        value: bytes,
        *,
        command_id: str | None = None,
    ) -> None:
        delivered = await producer.send_raw(
            topic, key=envelope.key.encode(), value=value, headers=envelope_headers(envelope)
        )
        self.records.append(
            HostileRecord(
                kind, variant, topic, delivered.partition, delivered.offset, command_id, envelope.key, act
            )
        )

    async def _forged_outcomes(self, producer: Producer, n: int) -> None:
        """RunCompleted / RunDeadLettered for a real activity: another run id, the right run id with
        a wrong fence token, and with a wrong attempt; each result marked so the checker knows it."""
        activity, pending = await self._activity()
        if activity is None:
            return
        wf, seq = activity.workflow_id, activity.sequence
        topic = self.kafka.topic(RUN_EVENTS)
        now = datetime.now(UTC)
        variant_tail = "" if pending else " (after it ended)"
        forged_run = f"{HOSTILE_PREFIX}run-{n}"
        cases: list[tuple[str, Message, str]] = [
            (
                "another run id",
                RunCompleted(
                    run_id=forged_run,
                    job_id=wf,
                    slot=now,
                    attempt=1,
                    fence_token=999,
                    owner="attacker",
                    workflow_id=wf,
                    sequence=seq,
                    result={**FORGED_MARKER, "run_id": activity.run_id},
                    started_at=now,
                    finished_at=now,
                ),
                f"{forged_run}/999/completed",
            ),
            (
                "wrong fence",
                RunCompleted(
                    run_id=activity.run_id,
                    job_id=wf,
                    slot=now,
                    attempt=1,
                    fence_token=999,
                    owner="attacker",
                    workflow_id=wf,
                    sequence=seq,
                    result={**FORGED_MARKER, "run_id": activity.run_id},
                    started_at=now,
                    finished_at=now,
                ),
                f"{activity.run_id}/999/completed-{n}",
            ),
            (
                "wrong attempt, dead-lettered",
                RunDeadLettered(
                    run_id=activity.run_id,
                    job_id=wf,
                    slot=now,
                    attempt=7,
                    fence_token=1,
                    owner="attacker",
                    workflow_id=wf,
                    sequence=seq,
                    reason="permanent_error",
                ),
                f"{activity.run_id}/1/dead-lettered-{n}",
            ),
        ]
        for variant, message, envelope_id in cases:
            envelope = wrap(message, id=envelope_id, key=wf, source="claimer", occurred_at=now)
            await self._send(
                producer, n, "forged_outcome", variant + variant_tail, topic, envelope, target=wf
            )

    async def _forged_timers(self, producer: Producer, n: int) -> None:
        """TimerFired for a real sleeping workflow: its own timer before its time, another
        workflow's timer id, an execution timeout it never set, an activity deadline it never had."""
        sleep, waiting = await self._sleep()
        if sleep is None:
            return
        wf = sleep.workflow_id
        topic = self.kafka.topic(TIMER_EVENTS)
        now = datetime.now(UTC)
        others = sorted({s.workflow_id for s in self.watch.sleeps.values()} - {wf})
        squatted = f"{self.rng.choice(others) if others else HOSTILE_PREFIX + 'wf'}/timer/{sleep.sequence}"
        activity_seq = max(sleep.sequence - 1, 1)
        cases: list[tuple[str, str, int | None, datetime, str]] = [
            ("another workflow's timer id", squatted, sleep.sequence, now, f"timer:{squatted}:{n}"),
            (
                "#execution-timeout never set",
                f"{wf}#execution-timeout",
                None,
                now,
                f"timer:{wf}#execution-timeout:{n}",
            ),
            (
                "#deadline never set",
                f"{wf}/{activity_seq}#deadline",
                activity_seq,
                now,
                f"timer:{wf}/{activity_seq}#deadline:{n}",
            ),
        ]
        if waiting:
            # The genuine timer's id and the genuine record's envelope id, before its time. Read
            # after its fire_at (the orchestrator held up by a fault) it states a fact: the
            # orchestrator may then take it as the firing or drop it as a copy (`true_from`); that
            # the sleep still did not end early is the sleep rule's to see.
            cases.insert(
                0,
                (
                    "its own timer early",
                    sleep.timer_id,
                    sleep.sequence,
                    sleep.fire_at,
                    f"timer:{sleep.timer_id}",
                ),
            )
        for variant, timer_id, sequence, fire_at, envelope_id in cases:
            fired = TimerFired(timer_id=timer_id, owner=wf, sequence=sequence, fire_at=fire_at, fired_at=now)
            envelope = wrap(fired, id=envelope_id, key=wf, source="ticker", occurred_at=now)
            true_from = sleep.fire_at if timer_id == sleep.timer_id else None
            await self._send(
                producer, n, "forged_timer", variant, topic, envelope, target=wf, true_from=true_from
            )

    def _attacker_job(self, n: int, fire_at: datetime) -> JobDue:
        job_id = f"{HOSTILE_PREFIX}job-{n}"
        return JobDue(
            run_id=slot_run_id(job_id, fire_at),
            job_id=job_id,
            slot=fire_at,
            attempt=2,
            kind="retry",
            handler="system.payout",
            payload=ATTACKER_PAYLOAD,
        )

    async def _timer_commands(self, producer: Producer, n: int) -> None:
        """StartTimer and CancelTimer on the public schedule-command topic (a JobDue of the
        attacker's payload; a cancel of a real workload timer), and on the internal timer topic a
        well-formed StartTimer unsigned and one squatting a real workflow's sleep id."""
        now = datetime.now(UTC)
        fire_at = now + timedelta(seconds=2)
        job = self._attacker_job(n, fire_at)
        start = StartTimer(
            timer_id=retry_timer_id(job.run_id, 2), fire_at=fire_at, on_fire=FireJobDue(job=job)
        )
        public = self.kafka.topic(SCHEDULE_COMMANDS)
        internal = self.kafka.topic(TIMER_COMMANDS)
        cases: list[tuple[str, str, Message, str]] = [
            ("StartTimer on the public topic", public, start, f"{HOSTILE_PREFIX}public-start-{n}"),
            (
                "CancelTimer of a workload timer on the public topic",
                public,
                CancelTimer(
                    timer_id=retry_timer_id(
                        self.rng.choice(self.timers).run_id if self.timers else slot_run_id("timer-0", now), 2
                    )
                ),
                f"{HOSTILE_PREFIX}public-cancel-{n}",
            ),
            (
                "StartTimer unsigned on the internal topic",
                internal,
                start,
                f"{HOSTILE_PREFIX}internal-start-{n}",
            ),
        ]
        sleep = self.watch.last_sleep
        if sleep is not None:
            squat = StartTimer(timer_id=sleep.timer_id, fire_at=fire_at, on_fire=FireJobDue(job=job))
            cases.append(
                (
                    "StartTimer squatting a sleep's id on the internal topic",
                    internal,
                    squat,
                    f"{HOSTILE_PREFIX}squat-{n}",
                )
            )
        for variant, topic, message, command_id in cases:
            envelope = wrap(
                message, id=command_id, key=command_id, source="cli", occurred_at=now, principal="key:system"
            )
            await self._send(producer, n, "timer_command", variant, topic, envelope, command_id=command_id)

    async def _forged_principals(self, producer: Producer, n: int) -> None:
        """Commands whose principal is not proven: unsigned, signed by an unregistered key, the
        insider's registered key claiming the workload's principal or past its scope, a genuine
        signed command altered after signing, and a cancel of a real order in another's name."""
        schedule_id = f"{HOSTILE_PREFIX}sched-{n}"
        definition = ScheduleDefinition(
            spec=CronSpec(expression="* * * * * *", timezone="UTC"),
            handler="system.payout",
            payload=ATTACKER_PAYLOAD,
            overlap="allow",
        )
        create = CreateSchedule(schedule_id=schedule_id, definition=definition)
        topic = self.kafka.topic(SCHEDULE_COMMANDS)

        def built(message: Message, command_id: str) -> Envelope:
            _, envelope = build_command(message, command_id=command_id, source="cli", principal="key:system")
            return envelope

        impostor = Signer(self.registered.private_key, "key:system")
        cases: list[tuple[str, str, Envelope]] = [
            ("unsigned, claiming key:system", topic, built(create, f"{HOSTILE_PREFIX}unsigned-{n}")),
            (
                "signed by an unregistered key",
                topic,
                self.unregistered.sign(built(create, f"{HOSTILE_PREFIX}unregistered-{n}"), topic=topic),
            ),
            (
                "a registered key claiming key:system",
                topic,
                impostor.sign(built(create, f"{HOSTILE_PREFIX}impostor-{n}"), topic=topic),
            ),
            (
                "a registered key past its scope",
                topic,
                self.registered.sign(built(create, f"{HOSTILE_PREFIX}scope-{n}"), topic=topic),
            ),
        ]
        # A genuine signed command (a schedule of the workload's shape), altered after signing.
        genuine = self.genuine.sign(
            built(
                CreateSchedule(
                    schedule_id=schedule_id, definition=definition.model_copy(update={"payload": {}})
                ),
                f"{HOSTILE_PREFIX}altered-{n}",
            ),
            topic=topic,
        )
        altered = genuine.model_copy(update={"data": create.model_dump(mode="json")})
        cases.append(("a signed command altered after signing", topic, altered))
        workflows = self.kafka.topic(WORKFLOW_COMMANDS)
        start = StartWorkflow(
            workflow_id=f"{HOSTILE_PREFIX}wf-{n}",
            workflow_type="system.checkout",
            input={"order_id": "attacker"},
        )
        cases.append(("StartWorkflow unsigned", workflows, built(start, f"{HOSTILE_PREFIX}start-{n}")))
        running = sorted(self.watch.running)
        if running:
            victim = self.rng.choice(running)
            cancel = CancelWorkflow(workflow_id=victim, reason="attacker")
            cases.append(
                (
                    "CancelWorkflow of a running order in key:system's name",
                    workflows,
                    impostor.sign(built(cancel, f"{HOSTILE_PREFIX}cancel-{n}"), topic=workflows),
                )
            )
        for variant, where, envelope in cases:
            await self._send(
                producer, n, "forged_principal", variant, where, envelope, command_id=envelope.id
            )

    async def _unacceptable(self, producer: Producer, n: int) -> None:
        """Records no service can store, written as a producer that does not validate: a NUL in a
        schedule's payload, a workflow input nested past the limit, `NaN` in a signal's payload and
        a NUL in a forged activity result."""
        now = datetime.now(UTC)
        schedules = self.kafka.topic(SCHEDULE_COMMANDS)
        workflows = self.kafka.topic(WORKFLOW_COMMANDS)
        definition = ScheduleDefinition(
            spec=CronSpec(expression="* * * * * *", timezone="UTC"), handler="system.payout", payload={}
        )
        nul_id = f"{HOSTILE_PREFIX}nul-{n}"
        nul = wrap(
            CreateSchedule(schedule_id=nul_id, definition=definition),
            id=nul_id,
            key=nul_id,
            source="cli",
            occurred_at=now,
        )
        nul_value = _json(nul, lambda data: data["definition"].__setitem__("payload", {"to": "attacker\x00"}))
        await self._send_raw(
            producer,
            n,
            "unacceptable",
            "NUL in a schedule's payload",
            schedules,
            nul,
            nul_value,
            command_id=nul_id,
        )

        deep_id = f"{HOSTILE_PREFIX}deep-{n}"
        deep = wrap(
            StartWorkflow(workflow_id=deep_id, workflow_type="system.checkout", input={}),
            id=deep_id,
            key=deep_id,
            source="cli",
            occurred_at=now,
        )
        deep_value = _json(deep, lambda data: data.__setitem__("input", _nested(TOO_DEEP)))
        await self._send_raw(
            producer,
            n,
            "unacceptable",
            f"input nested {TOO_DEEP} deep",
            workflows,
            deep,
            deep_value,
            command_id=deep_id,
        )

        target = sorted(self.watch.running)
        victim = self.rng.choice(target) if target else f"{HOSTILE_PREFIX}wf-{n}"
        nan_id = f"{HOSTILE_PREFIX}nan-{n}"
        nan = wrap(
            SignalWorkflow(workflow_id=victim, signal="note", payload={"text": "x"}),
            id=nan_id,
            key=victim,
            source="cli",
            occurred_at=now,
        )
        nan_value = _json(nan, lambda data: data["payload"].__setitem__("text", float("nan")))
        await self._send_raw(
            producer,
            n,
            "unacceptable",
            "NaN in a signal's payload",
            workflows,
            nan,
            nan_value,
            command_id=nan_id,
        )

        activity, _ = await self._activity()
        if activity is not None:
            forged = RunCompleted(
                run_id=activity.run_id,
                job_id=activity.workflow_id,
                slot=now,
                attempt=1,
                fence_token=1,
                owner="attacker",
                workflow_id=activity.workflow_id,
                sequence=activity.sequence,
                result={},
                started_at=now,
                finished_at=now,
            )
            envelope = wrap(
                forged,
                id=f"{activity.run_id}/1/nul-{n}",
                key=activity.workflow_id,
                source="claimer",
                occurred_at=now,
            )
            value = _json(
                envelope, lambda data: data.__setitem__("result", {**FORGED_MARKER, "note": "\x00"})
            )
            await self._send_raw(
                producer,
                n,
                "unacceptable",
                "NUL in a forged activity result",
                self.kafka.topic(RUN_EVENTS),
                envelope,
                value,
            )


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"to": "attacker"}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def _json(envelope: Envelope, change: Any) -> bytes:
    """``envelope`` as the wire has it, its data changed by ``change`` after the models checked it
    (a producer that does not validate); `NaN` written as the literal no JSON parser should take."""
    raw = json.loads(encode(envelope))
    change(raw["data"])
    return json.dumps(raw, allow_nan=True, ensure_ascii=False).encode("utf-8", errors="surrogatepass")
