"""Applying schedule commands from the public schedule-command topic, and timer commands from the
internal timer topic.

Each command's effects commit in one transaction holding: its inbox entry (the envelope id, so a
redelivery is recognised and does nothing), the state change, and the outbox rows announcing it
(the lifecycle event and CommandAccepted, or CommandRejected plus a DeadLettered record for the
DLQ). A refused command changes nothing but is still recorded, so it is refused once. A polled
batch shares one such transaction (retries arrive as bursts of StartTimers, and a commit each
capped intake at tens of timers a second); a batch that fails is applied again one by one.

Each topic takes its own commands only. A StartTimer fires whatever it carries (a whole JobDue,
another workflow's TimerFired), so timer commands are refused on the public topic, which the api
and any CLI user may write ("timer commands are internal"); the internal topic, which only the
claimer and the orchestrator may write, takes nothing else. Each topic's command ids have their
own inbox, so a public command cannot take the id of a timer command first.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from slotflow import tracing
from slotflow.contracts import (
    Backfill,
    CancelTimer,
    CreateSchedule,
    DeleteSchedule,
    Envelope,
    JobDue,
    MarkSlots,
    Message,
    PauseSchedule,
    RerunSlots,
    ResumeSchedule,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
    SlotRerun,
    SlotsMarked,
    SlotsRerun,
    StartTimer,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.catalogue import TICKER_COMMAND_TYPES
from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import KEY_MAX_CHARS, TYPE_HEADER, fit_id
from slotflow.contracts.schedules import (
    ScheduleDefinition,
    definition_changes,
    patch_definition,
    refuse_random_cron,
)
from slotflow.core.identity import rerun_run_id, run_id
from slotflow.errors import PoisonMessage, TransientStorageError
from slotflow.kafka.loop import Incoming
from slotflow.kafka.records import Record
from slotflow.pg.outbox import Staged
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool
from slotflow.principals import CommandVerifier, SignatureSettings, UnprovenCommand
from slotflow_ticker.claims import BacklogTooLong, SlotFirer, schedule_key, timer_key
from slotflow_ticker.events import EventFactory, Outgoing, stage_all
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.planning import Position, manual_slot, start_position
from slotflow_ticker.rows import ScheduleRow, dump_action
from slotflow_ticker.sql import Queries
from slotflow_ticker.validation import (
    CommandRefused,
    backfill_plan,
    backfill_skips,
    require_fireable,
    require_live,
    require_new,
    require_some_slot,
)

log = logging.getLogger(__name__)

SERVICE = "ticker"
#: Every command type the ticker consumes (anything else on its topic is dead-lettered).
COMMANDS = TICKER_COMMAND_TYPES
#: Failures staging a rejection that mean PostgreSQL is away: the caller waits and calls again.
STAGING_OUTAGES: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)
#: Claims' worth of slots an UpdateSchedule or DeleteSchedule may settle in its own transaction.
SETTLE_MAX_CHUNKS = 100


@dataclass(frozen=True, slots=True)
class CommandTopics:
    """The two topics the ticker takes commands from, as this deployment names them."""

    #: The public schedule-command topic (the api, the CLI, any client with write access).
    schedules: str
    #: The internal timer topic (the claimer and the orchestrator only).
    timers: str
    #: Also accept timer commands from the public topic: a rolling upgrade's setting only.
    legacy_timer_commands: bool = False


@dataclass
class Applied:
    """What applying one command staged."""

    staged: list[Outgoing] = field(default_factory=list)
    #: (wheel key, due instant) of schedules and timers the command made due, for the timing wheel.
    due: list[tuple[str, datetime]] = field(default_factory=list)


def subject_of(message: Message) -> str:
    """The schedule or timer a command is about (the record key)."""
    if isinstance(message, StartTimer | CancelTimer):
        return message.timer_id
    subject: str = getattr(message, "schedule_id", "")
    return subject


class CommandHandler:
    """Applies decoded commands: the ConsumeLoop calls `handle_batch` once per polled batch, and
    `handle` once per record when a batch has to be retried one command at a time."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        queries: Queries,
        events: EventFactory,
        firer: SlotFirer,
        metrics: TickerMetrics,
        on_commit: Callable[[list[tuple[str, datetime]]], None],
        topics: CommandTopics,
        max_backfill_slots: int = 10_000,
        verifier: CommandVerifier | None = None,
    ) -> None:
        self._pool = pool
        self._topics = topics
        #: Proves each command's principal before it is applied (with signatures required).
        self._verifier = verifier or CommandVerifier(SignatureSettings(command_signatures="optional"))
        self._max_backfill_slots = max_backfill_slots
        self._schema = schema
        self._q = queries
        self._events = events
        self._firer = firer
        self._metrics = metrics
        self._on_commit = on_commit

    async def handle(self, incoming: Incoming) -> None:
        """Apply one command in one transaction (inbox + state + outbox)."""
        envelope, message = incoming.envelope, incoming.message
        await self._verifier.refresh()  # every key revoked before this call is known after it
        async with self._pool.acquire() as conn, conn.transaction():
            if not await self._record_new(conn, [incoming]):
                return
            now: datetime = await conn.fetchval(self._q.now)
            try:
                self.admit(incoming)
                # Every refusal is raised before the command writes anything (see `apply`), so a
                # refused command leaves only its inbox entry and the rejection behind: an
                # unproven principal first of all.
                self._verifier.verify(envelope, topic=incoming.record.topic, now=now)
                applied = await self.apply(conn, envelope, message, now=now)
                outcome = "accepted"
                applied.staged.append(self._accepted(envelope, message, now))
            except (UnprovenCommand, CommandRefused, BacklogTooLong) as refusal:
                outcome = "rejected"
                applied = Applied(self.rejection(incoming.record, envelope, refusal, now=now))
            await stage_all(conn, schema=self._schema, items=applied.staged)
        self._count(incoming, outcome)
        self._on_commit(applied.due)

    async def handle_batch(self, batch: list[Incoming]) -> None:
        """Apply a polled batch of commands in one transaction (the ConsumeLoop's batch handler).

        The same effects as `handle` once per command, in order, at the cost of one commit: every
        command id goes into the inbox with one statement (a redelivered one, or a second copy in
        the batch, is skipped), consecutive StartTimers become one insert, and every command's
        events, CommandRejected and DeadLettered included, are staged with one statement. Other
        commands apply one by one inside a savepoint, so a refusal undoes only its own command.
        If the transaction fails other than by an outage, the ConsumeLoop handles the batch
        again one command at a time with `handle`, which parks the one that cannot be applied.
        """
        await self._verifier.refresh()  # every key revoked before this call is known after it
        async with self._pool.acquire() as conn, conn.transaction():
            new = await self._record_new(conn, batch)
            if not new:
                return
            now: datetime = await conn.fetchval(self._q.now)
            staged: list[Outgoing] = []
            due: list[tuple[str, datetime]] = []
            outcomes: list[tuple[Incoming, str]] = []
            timers: dict[str, tuple[StartTimer, str | None]] = {}
            for incoming in batch:
                envelope, message = incoming.envelope, incoming.message
                if _inbox_key(incoming) not in new:
                    continue
                new.discard(_inbox_key(incoming))
                try:
                    self.admit(incoming)
                except CommandRefused as refusal:
                    # Refused at the door: nothing of it is applied, so the timers before it need
                    # not be stored first.
                    staged.extend(self.rejection(incoming.record, envelope, refusal, now=now))
                    outcomes.append((incoming, "rejected"))
                    continue
                try:
                    self._verifier.verify(envelope, topic=incoming.record.topic, now=now)
                except UnprovenCommand as refusal:
                    staged.extend(self.rejection(incoming.record, envelope, refusal, now=now))
                    outcomes.append((incoming, "rejected"))
                    continue
                if isinstance(message, StartTimer):
                    # The first StartTimer of a timer id wins, as it would one transaction each.
                    timers.setdefault(message.timer_id, (message, _trace_parent(incoming.record)))
                    due.append((timer_key(message.timer_id), message.fire_at))
                    staged.append(self._accepted(envelope, message, now))
                    outcomes.append((incoming, "accepted"))
                    continue
                # Any other command sees the timers before it, as it would one by one.
                await self._insert_timers(conn, timers)
                timers = {}
                try:
                    async with conn.transaction():
                        applied = await self.apply(conn, envelope, message, now=now)
                except (CommandRefused, BacklogTooLong) as refusal:
                    staged.extend(self.rejection(incoming.record, envelope, refusal, now=now))
                    outcomes.append((incoming, "rejected"))
                    continue
                staged.extend(applied.staged)
                staged.append(self._accepted(envelope, message, now))
                due.extend(applied.due)
                outcomes.append((incoming, "accepted"))
            await self._insert_timers(conn, timers)
            await stage_all(conn, schema=self._schema, items=staged)
        for incoming, outcome in outcomes:
            self._count(incoming, outcome)
        self._on_commit(due)

    def admit(self, incoming: Incoming) -> None:
        """Refuse a command that came through the wrong door: a timer command on the public topic
        (unless the rolling upgrade's setting lets it in), anything else on the internal one.

        Raises:
            CommandRefused: the command is not taken from the topic it came on.
        """
        topic, message, kind = incoming.record.topic, incoming.message, incoming.envelope.type
        timer_command = isinstance(message, StartTimer | CancelTimer)
        if topic == self._topics.timers:
            if not timer_command:
                raise CommandRefused(
                    f"{kind} is not a timer command: the internal timer topic {self._topics.timers} "
                    f"takes StartTimer and CancelTimer only; send it to {self._topics.schedules}"
                )
            return
        if not timer_command or self._topics.legacy_timer_commands:
            return
        raise CommandRefused(
            f"timer commands are internal: {kind} is taken only from {self._topics.timers}, which only "
            f"the claimer and the orchestrator may write, never from the public command topic "
            f"{self._topics.schedules}"
        )

    def _count(self, incoming: Incoming, outcome: str) -> None:
        """Count a committed command (a batch that failed is counted once, when applied again)."""
        self._metrics.commands.labels(incoming.envelope.type, outcome).inc()
        public = incoming.record.topic != self._topics.timers
        if public and isinstance(incoming.message, StartTimer | CancelTimer):
            # Accepted here only while the legacy setting is on; otherwise refused at the door.
            label = "accepted" if outcome == "accepted" else "refused"
            self._metrics.public_timer_commands.labels(label).inc()

    async def _record_new(self, conn: Conn, batch: list[Incoming]) -> set[tuple[str, str]]:
        """Record every command id of ``batch`` in its topic's inbox; returns the (topic, id) of
        those seen for the first time (a redelivery, or a second copy in the batch, is not)."""
        public = [i for i in batch if i.record.topic != self._topics.timers]
        internal = [i for i in batch if i.record.topic == self._topics.timers]
        new: set[tuple[str, str]] = set()
        if public:
            rows = await conn.fetch(
                self._q.record_commands,
                [i.envelope.id for i in public],
                [i.record.topic for i in public],
            )
            # The public topic's ids share one inbox, as they always have (a redelivery of a
            # command recorded before this version is still recognised).
            ids = {r["event_id"] for r in rows}
            new |= {_inbox_key(i) for i in public if i.envelope.id in ids}
        if internal:
            rows = await conn.fetch(self._q.record_timer_commands, [i.envelope.id for i in internal])
            new |= {(self._topics.timers, r["event_id"]) for r in rows}
        return new

    async def _insert_timers(self, conn: Conn, timers: dict[str, tuple[StartTimer, str | None]]) -> None:
        if not timers:
            return
        await conn.execute(
            self._q.insert_timers,
            list(timers),
            [t.fire_at for t, _ in timers.values()],
            [dump_action(t.on_fire) for t, _ in timers.values()],
            [parent for _, parent in timers.values()],
        )

    def _accepted(self, envelope: Envelope, message: Message, now: datetime) -> Staged:
        return self._events.accepted(
            command_id=envelope.id, command_type=envelope.type, subject=subject_of(message), occurred_at=now
        )

    def rejection(
        self, record: Record, envelope: Envelope, error: Exception, *, now: datetime
    ) -> list[Outgoing]:
        """CommandRejected for the sender: a refusal is an answer, not poison.

        A duplicate create or a trigger of an unknown schedule is a well-formed command that the
        ticker read and decided against; the caller reads why (the api's read-your-writes, the
        CLI's --wait). The DLQ is kept for what no consumer could process (undecodable, invalid,
        unknown type: the consume loop parks those), so it does not fill with answers.
        """
        log.warning("rejected %s %s: %s", envelope.type, envelope.id, error)
        del record  # the record itself is not parked
        return [
            self._events.rejected(
                command_id=envelope.id,
                command_type=envelope.type,
                subject=envelope.key,
                reason=str(error),
                occurred_at=now,
            )
        ]

    async def reject_poison(
        self, records: list[Record], *, decode_record: Callable[[Record], object]
    ) -> None:
        """CommandRejected for records the consume loop will park as poison.

        The loop itself dead-letters them; this tells the sender why, with the command id when the
        envelope decoded that far (else the record position stands in for it).

        Total but for outages: a rejection that cannot be built or staged is logged and left out
        (the record is still parked by the loop), so no record can stop the consumer here.

        Raises:
            TransientStorageError, connection errors: PostgreSQL is away; call again.
        """
        staged: list[Outgoing] = []
        now: datetime | None = None
        for record in records:
            try:
                decode_record(record)
            except PoisonMessage as poison:
                if now is None:
                    now = await self._pool.fetchval(self._q.now)
                rejection = poison_rejection(self._events, record, poison, now=now)
                if rejection is not None:
                    staged.append(rejection)
                self._metrics.commands.labels("invalid", "rejected").inc()
        if staged:
            await self._stage_rejections(staged)
            self._on_commit([])

    async def _stage_rejections(self, staged: list[Outgoing]) -> None:
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                await stage_all(conn, schema=self._schema, items=staged)
            return
        except STAGING_OUTAGES:
            raise
        except Exception as err:  # noqa: BLE001 - one at a time, so one refusal drops only itself
            log.error("ticker: staging %d rejections failed (%s); staging one by one", len(staged), err)
        for item in staged:
            try:
                async with self._pool.acquire() as conn, conn.transaction():
                    await stage_all(conn, schema=self._schema, items=[item])
            except STAGING_OUTAGES:
                raise
            except Exception as err:  # noqa: BLE001 - the record itself is parked by the loop
                log.error("ticker: a rejection could not be staged, left out: %s", err)

    async def apply(self, conn: Conn, envelope: Envelope, message: Message, *, now: datetime) -> Applied:
        """Apply ``message`` inside the caller's transaction.

        Each branch checks everything that can refuse the command before its first write.

        Raises:
            CommandRefused: the command does not fit the current state.
            BacklogTooLong: the schedule's unhandled slots are too many to settle here.
        """
        cid = envelope.id
        if isinstance(message, StartTimer):
            # Handled one at a time, under the command's consumer span (tracing on).
            parent = tracing.headers_for().get(tracing.TRACEPARENT)
            await conn.fetchval(
                self._q.insert_timer,
                message.timer_id,
                message.fire_at,
                dump_action(message.on_fire),
                parent.decode("latin-1") if parent is not None else None,
            )
            return Applied(due=[(timer_key(message.timer_id), message.fire_at)])
        if isinstance(message, CancelTimer):
            await conn.fetchval(self._q.cancel_timer, message.timer_id)
            return Applied()
        schedule_id: str = getattr(message, "schedule_id", "")
        record = await conn.fetchrow(self._q.lock_schedule, schedule_id)
        if record is not None:
            now = await conn.fetchval(self._q.locked_now)
        row = ScheduleRow.from_record(record) if record is not None else None
        if isinstance(message, CreateSchedule):
            return await self._create(conn, message, row, cid=cid, now=now)
        live = require_live(row, schedule_id)
        if isinstance(message, UpdateSchedule):
            return await self._update(conn, message, live, cid=cid, now=now)
        if isinstance(message, PauseSchedule):
            reason, resume_at = message.reason, message.resume_at
            if live.paused:
                # A second pause (a script pausing again, a colleague adding a note) keeps what
                # the first one said unless it says otherwise: wiping the reason and resume_at
                # would turn a pause until 06:00 into one until someone remembers.
                reason = reason or live.pause_reason
                resume_at = resume_at or live.resume_at
            await conn.execute(self._q.pause, schedule_id, reason, resume_at, now)
            event = SchedulePaused(schedule_id=schedule_id, reason=reason, resume_at=resume_at)
            return Applied([self._event(event, cid, "paused", schedule_id, now)])
        if isinstance(message, ResumeSchedule):
            if not live.paused:
                return Applied()
            await conn.execute(self._q.resume, schedule_id, now, message.catch_up)
            resumed = ScheduleResumed(schedule_id=schedule_id, next_fire_at=live.next_fire_at)
            return Applied(
                [self._event(resumed, cid, "resumed", schedule_id, now)],
                due=_due(schedule_id, live.next_fire_at),
            )
        if isinstance(message, DeleteSchedule):
            staged, _ = await self._settle(conn, live, now=now)
            await conn.execute(self._q.delete, schedule_id)
            staged.append(
                self._event(ScheduleDeleted(schedule_id=schedule_id), cid, "deleted", schedule_id, now)
            )
            return Applied(staged)
        if isinstance(message, TriggerNow):
            slot = manual_slot(schedule_id, live.definition, now)
            staged = [
                self._events.job_due(
                    schedule_id, live.definition, slot, kind="manual", fire_at=now, occurred_at=now
                )
            ]
            self._metrics.slots_fired.labels("manual").inc()
            return Applied(staged)
        if isinstance(message, Backfill):
            slots = backfill_plan(message, live.definition, now=now, cap=self._max_backfill_slots)
            skipped = backfill_skips(message, live.definition, cap=self._max_backfill_slots)
            # The backfill's own overlap policy, not the schedule's: its slots are all due at once,
            # and the schedule's `skip` would run the first and skip the rest as "still running".
            staged = [
                self._events.backfill_due(
                    schedule_id,
                    live.definition,
                    slot.at,
                    overlap=message.overlap,
                    max_concurrent=message.max_concurrent,
                    occurred_at=now,
                )
                for slot in slots
            ]
            self._metrics.slots_fired.labels("backfill").inc(len(staged))
            # Local times the DST policy skips inside the range are recorded, never left out. Their
            # ids are the claims' own (run id, nominal time), so a gap already recorded collapses.
            staged.extend(self._events.slot_skipped(schedule_id, s, occurred_at=now) for s in skipped)
            self._metrics.slots_skipped.labels("dst_nonexistent").inc(len(skipped))
            return Applied(staged)
        if isinstance(message, RerunSlots):
            return await self._rerun(conn, envelope, message, live, now=now)
        if isinstance(message, MarkSlots):
            _require_passed((*message.slots,), schedule_id, now=now, what="marked")
            marked = SlotsMarked(
                schedule_id=schedule_id,
                slots=tuple(sorted(message.slots)),
                mark=message.mark,
                principal=envelope.principal,
                reason=message.reason,
            )
            return Applied([self._event(marked, cid, "marked", schedule_id, now)])
        raise CommandRefused(f"{envelope.type} is not a ticker command")

    async def _rerun(
        self, conn: Conn, envelope: Envelope, message: RerunSlots, row: ScheduleRow, *, now: datetime
    ) -> Applied:
        """Record a re-run number for each slot and re-issue its JobDue from the current definition.

        The claimer takes a re-run's JobDue only when the row recorded here holds its number (a
        forged `#rerun-9` runs nothing), reopens the slot's own run only where that run is not live
        or completed, and runs a forced slot as the new run `{run id}#rerun-{n}`. A paused schedule's
        slots are re-run too: the re-run is the operator's explicit act, like a redrive.
        """
        schedule_id = message.schedule_id
        _require_passed((*message.slots, *message.forced), schedule_id, now=now, what="re-run")
        wanted = [*message.slots, *message.forced]
        forced = [False] * len(message.slots) + [True] * len(message.forced)
        recorded = await conn.fetch(
            self._q.record_reruns,
            schedule_id,
            wanted,
            forced,
            envelope.id,
            envelope.principal,
            message.reason,
            now,
        )
        definition = row.definition
        staged: list[Outgoing] = []
        reruns: list[SlotRerun] = []
        for rerun in sorted(recorded, key=lambda r: (r["slot"], r["forced"])):
            slot, number, is_forced = rerun["slot"], rerun["number"], rerun["forced"]
            run = rerun_run_id(schedule_id, slot, number) if is_forced else run_id(schedule_id, slot)
            job = JobDue(
                run_id=run,
                job_id=schedule_id,
                slot=slot,
                kind="manual",
                handler=definition.handler,
                payload=definition.payload,
                retry=definition.retry,
                overlap=definition.overlap,
                tags=definition.tags,
                fire_at=now,
                rerun=number,
            )
            staged.append(self._events.job_due_message(job, occurred_at=now))
            reruns.append(SlotRerun(slot=slot, run_id=run, number=number, forced=is_forced))
        done = SlotsRerun(
            schedule_id=schedule_id,
            reruns=tuple(reruns),
            handler=definition.handler,
            principal=envelope.principal,
            reason=message.reason,
        )
        staged.append(self._event(done, envelope.id, "rerun", schedule_id, now))
        self._metrics.slots_fired.labels("rerun").inc(len(reruns))
        return Applied(staged)

    async def _create(
        self, conn: Conn, message: CreateSchedule, row: ScheduleRow | None, *, cid: str, now: datetime
    ) -> Applied:
        require_new(row, message.schedule_id)
        require_fireable(message.definition, message.schedule_id)
        require_some_slot(message.definition, message.schedule_id, now=now)
        position = start_position(message.schedule_id, message.definition, after=now)
        inserted = await conn.fetchval(
            self._q.insert_schedule,
            message.schedule_id,
            message.definition.model_dump_json(),
            message.paused,
            position.next_slot,
            position.next_fire_at,
            position.covered_until,
            now,
        )
        if inserted is None:
            # Another create of the same id committed between our lock attempt and this insert.
            raise CommandRefused(
                f"schedule {message.schedule_id} already exists; use UpdateSchedule to change it"
            )
        event = ScheduleCreated(
            schedule_id=message.schedule_id,
            definition=message.definition,
            paused=message.paused,
            next_fire_at=position.next_fire_at,
        )
        due = [] if message.paused else _due(message.schedule_id, position.next_fire_at)
        return Applied([self._event(event, cid, "created", message.schedule_id, now)], due=due)

    async def _update(
        self, conn: Conn, message: UpdateSchedule, row: ScheduleRow, *, cid: str, now: datetime
    ) -> Applied:
        definition = _new_definition(message, row)
        require_fireable(definition, message.schedule_id)
        require_some_slot(definition, message.schedule_id, now=now)
        changed = tuple(field for field, _, _ in definition_changes(row.definition, definition))
        if not changed:
            # Nothing differs: accepted, and the grid and its coverage stay exactly as they are.
            return Applied()
        # Slots of the old definition up to now are handled under it; the new grid starts after.
        staged, settled = await self._settle(conn, row, now=now)
        position = start_position(message.schedule_id, definition, after=settled.covered_until)
        await conn.execute(
            self._q.replace_definition,
            message.schedule_id,
            definition.model_dump_json(),
            position.next_slot,
            position.next_fire_at,
            position.covered_until,
        )
        event = ScheduleUpdated(
            schedule_id=message.schedule_id,
            definition=definition,
            next_fire_at=position.next_fire_at,
            changed=changed,
        )
        staged.append(self._event(event, cid, "updated", message.schedule_id, now))
        return Applied(staged, due=[] if row.paused else _due(message.schedule_id, position.next_fire_at))

    async def _settle(
        self, conn: Conn, row: ScheduleRow, *, now: datetime
    ) -> tuple[list[Outgoing], Position]:
        staged, position = await self._firer.settle(conn, row, now=now, max_chunks=SETTLE_MAX_CHUNKS)
        await conn.execute(
            self._q.set_position,
            row.schedule_id,
            position.next_slot,
            position.next_fire_at,
            position.covered_until,
        )
        return staged, position

    def _event(self, message: Message, cid: str, what: str, schedule_id: str, now: datetime) -> Staged:
        # A command id may be at the envelope's limit already: fit_id keeps the derived id in it.
        return self._events.schedule_event(
            message, id=fit_id(cid, f"/{what}"), key=schedule_id, occurred_at=now
        )


def _new_definition(message: UpdateSchedule, row: ScheduleRow) -> ScheduleDefinition:
    """The whole definition an update asks for: the given one, or the stored one patched.

    Raises:
        CommandRefused: the patched definition is not valid (the reason names each field).
    """
    if message.definition is not None:
        return message.definition
    try:
        patched = patch_definition(row.definition, message.patch or {})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'definition'}: {e['msg']}"
            for e in err.errors(include_url=False)
        )
        raise CommandRefused(f"the patch does not fit schedule {message.schedule_id}: {problems}") from None
    try:
        # A stored R (read as H) is refused on the next change, even one that leaves the spec alone.
        refuse_random_cron(patched)
    except ValueError as err:
        raise CommandRefused(f"schedule {message.schedule_id}: {err}") from None
    return patched


def _require_passed(slots: tuple[datetime, ...], schedule_id: str, *, now: datetime, what: str) -> None:
    """Refuse a slot that has not come yet: only a slot that was due can be re-run or marked.

    Raises:
        CommandRefused: the first such slot, and the database clock it was judged by.
    """
    ahead = [slot for slot in slots if slot > now]
    if ahead:
        raise CommandRefused(
            f"slot {min(ahead).isoformat()} of schedule {schedule_id} has not come yet (the database "
            f"clock reads {now.isoformat()}): only a slot that was due can be {what}"
        )


def _due(schedule_id: str, next_fire_at: datetime | None) -> list[tuple[str, datetime]]:
    return [] if next_fire_at is None else [(schedule_key(schedule_id), next_fire_at)]


def poison_rejection(
    events: EventFactory, record: Record, poison: PoisonMessage, *, now: datetime
) -> Staged | None:
    """The CommandRejected for a poison ``record``, or None (logged) when none can be built.

    Pure, and total for any bytes as key, value and headers (property-tested): `events.rejected`
    cuts and hashes what it echoes to fit the envelope's limits and PostgreSQL text.
    """
    try:
        command_id, command_type, subject = _identify(record)
        return events.rejected(
            command_id=command_id,
            command_type=command_type,
            subject=subject,
            reason=f"{poison.reason}: {poison}",
            occurred_at=now,
        )
    except Exception as err:  # noqa: BLE001 - the loop still parks the record; the sender gets the letter
        log.error("ticker: no CommandRejected for %s: %s", record.position, err)
        return None


def _identify(record: Record) -> tuple[str, str, str]:
    """(command id, type, subject) of a poison record, as far as it can be read."""
    subject = (
        record.key[: 4 * KEY_MAX_CHARS].decode("utf-8", errors="replace") if record.key is not None else ""
    )
    header = record.header(TYPE_HEADER)
    command_type = header[:800].decode("utf-8", errors="replace") if header else "unknown"
    try:
        envelope = decode(record.value)
    except PoisonMessage:
        return record.position, command_type, subject
    return envelope.id, envelope.type, envelope.key or subject


def _inbox_key(incoming: Incoming) -> tuple[str, str]:
    """What the inbox knows a command by: its topic and its id (each topic's ids are its own)."""
    return incoming.record.topic, incoming.envelope.id


def _trace_parent(record: Record) -> str | None:
    """The traceparent a StartTimer's record carries, kept with its timer (tracing on)."""
    if not tracing.enabled():
        return None
    return tracing.storable_traceparent(record.header(tracing.TRACEPARENT))
