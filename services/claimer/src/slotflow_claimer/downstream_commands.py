"""An operator's commands on a downstream: open, close, configure; each applied once and answered.

The claimers consume `slotflow.downstreams.commands.v1` in one consumer group of their own, so one
claimer applies each command. It does so in one transaction: the inbox records the command id
(a redelivered command changes nothing), the downstream's row is locked like every admission
(so the change is ordered with the claimers' own decisions), the change is recorded, and the
DownstreamChanged event and the answer (CommandAccepted or CommandRejected, on the downstream
events topic) are staged in the outbox. A command whose principal is not proven (signatures
required) is answered CommandRejected and changes nothing.
"""

import logging
from collections.abc import Callable
from datetime import datetime

from slotflow.contracts import (
    CloseDownstream,
    CommandAccepted,
    CommandRejected,
    ConfigureDownstream,
    Envelope,
    Message,
    OpenDownstream,
    wrap,
)
from slotflow.contracts.envelope import fit_id
from slotflow.contracts.topics import DOWNSTREAM_EVENTS
from slotflow.core.downstreams import Breaker, with_settings
from slotflow.errors import PermanentError
from slotflow.kafka.loop import Incoming
from slotflow.pg.inbox import record_once
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import sql
from slotflow.principals import CommandVerifier, SignatureSettings, UnprovenCommand
from slotflow.settings import KafkaSettings
from slotflow_claimer.downstreams import Gate
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.sql import (
    DOWNSTREAM_COMMAND_KNOWN,
    DOWNSTREAM_COMMAND_NOW,
)

log = logging.getLogger(__name__)


class Rejected(PermanentError):
    """The command cannot be applied as asked; the message says why (sent in CommandRejected)."""


class DownstreamCommands:
    """Applies downstream commands (the ConsumeLoop handler of one claimer)."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        gate: Gate,
        kafka: KafkaSettings,
        metrics: ClaimerMetrics,
        wake_relay: Callable[[], None] | None = None,
        verifier: CommandVerifier | None = None,
    ) -> None:
        self._pool = pool
        #: Proves each command's principal before it is applied (with signatures required).
        self._verifier = verifier or CommandVerifier(SignatureSettings(command_signatures="optional"))
        self._schema = schema
        self._gate = gate
        self._topic = kafka.topic(DOWNSTREAM_EVENTS)
        self._metrics = metrics
        self._wake = wake_relay

    async def handle(self, incoming: Incoming) -> None:
        envelope, command = incoming.envelope, incoming.message
        if not isinstance(command, OpenDownstream | CloseDownstream | ConfigureDownstream):
            return  # unreachable: the loop accepts these only
        await self._verifier.refresh()  # every key revoked before this call is known after it
        async with self._pool.acquire() as conn, conn.transaction():
            if not await record_once(
                conn, schema=self._schema, event_id=envelope.id, topic=incoming.record.topic
            ):
                return
            now: datetime = await conn.fetchval(DOWNSTREAM_COMMAND_NOW)
            try:
                try:
                    self._verifier.verify(envelope, topic=incoming.record.topic, now=now)
                except UnprovenCommand as refusal:
                    raise Rejected(str(refusal)) from None
                staged = await self._apply(conn, envelope, command)
                answer: Message = CommandAccepted(
                    command_id=envelope.id, command_type=envelope.type, subject=command.downstream
                )
                outcome = "accepted"
            except Rejected as err:
                staged = []
                answer = CommandRejected(
                    command_id=envelope.id,
                    command_type=envelope.type,
                    subject=command.downstream,
                    reason=str(err),
                )
                outcome = "rejected"
            reply = wrap(
                answer,
                id=fit_id(envelope.id, f"/{outcome}"),
                key=command.downstream,
                source="claimer",
                occurred_at=now,
            )
            await append_many(conn, schema=self._schema, items=[*staged, Staged(self._topic, reply)])
        self._metrics.downstream_commands.labels(envelope.type, outcome).inc()
        log.info("%s %s for %s: %s", envelope.type, envelope.id, command.downstream, outcome)
        if self._wake is not None:
            self._wake()

    async def _apply(
        self, conn: Conn, envelope: Envelope, command: OpenDownstream | CloseDownstream | ConfigureDownstream
    ) -> list[Staged]:
        name = command.downstream
        if isinstance(command, CloseDownstream) and not await conn.fetchval(
            sql(DOWNSTREAM_COMMAND_KNOWN, self._schema), name
        ):
            raise Rejected(f"no downstream named {name!r}: no handler declared it and none was opened")
        gate = self._gate
        locked_rows, now = await gate.lock(conn, [name])
        locked = locked_rows[name]
        before = locked.breaker
        if isinstance(command, OpenDownstream):
            if before.state == "open" and before.manual:
                return []  # already held open by an operator
            opened = Breaker("open", now, manual=True)
            return await gate.move(
                conn,
                name,
                locked,
                opened,
                cause="operator_open",
                reason=command.reason,
                command_id=envelope.id,
            )
        if isinstance(command, CloseDownstream):
            if before.state == "closed" and not before.manual:
                return []
            return await gate.move(
                conn,
                name,
                locked,
                Breaker("closed"),
                cause="operator_close",
                reason=command.reason,
                command_id=envelope.id,
            )
        try:
            policy = with_settings(gate.default_policy, command.settings)
        except ValueError as err:
            raise Rejected(f"settings for {name!r} do not make a policy: {err}") from err
        await gate.configure(conn, name, command.settings)
        shown = command.settings.model_dump(exclude_none=True)
        return await gate.changes.record(
            conn,
            name,
            before,
            before,
            cause="configured",
            reason=f"settings {shown}" if shown else "settings back to the claimers' defaults",
            settings=command.settings,
            policy=policy,
            command_id=envelope.id,
        )
