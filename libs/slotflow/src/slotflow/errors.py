"""The error hierarchy every slotflow package raises from.

Catch `SlotflowError`; branch on `retryable` or on the class, never on message text. A class's
docstring is its default message.

`SlotflowError` and `ConfigurationError` are defined in `slotflow_base.errors` (the stats worker,
which cannot import this library, raises from them too) and are the same classes here.
"""

from typing import ClassVar

from slotflow_base.errors import ConfigurationError as ConfigurationError
from slotflow_base.errors import SlotflowError as SlotflowError


class TransientError(SlotflowError):
    """A failure that may pass on its own: a timeout, a busy server, a dropped connection."""

    retryable = True


class PermanentError(SlotflowError):
    """A failure that will repeat on every attempt: bad input, a business rule that says no."""


class InvalidCronExpression(PermanentError, ValueError):
    """A cron expression outside slotflow's grammar; the message names the field and what is wrong.

    A ValueError too, so a pydantic validator turns it into a validation error of its field.
    """


class CronNeedsScheduleId(PermanentError):
    """A cron expression with `H` takes its values from the schedule id, and none was given."""


class TransientStorageError(TransientError):
    """PostgreSQL or Kafka was unreachable; the same operation may succeed later."""


class KafkaAuthenticationFailed(PermanentError):
    """The Kafka broker refused this client's credentials or its TLS handshake."""


class KafkaAccessDenied(PermanentError):
    """The Kafka broker's authoriser refused an operation: an ACL this principal needs is missing."""


class FenceRejected(SlotflowError):
    """A write carried a fencing token older than the one storage has already seen."""

    def __init__(self, resource: str, token: int, current: int) -> None:
        self.resource = resource
        self.token = token
        self.current = current
        super().__init__(f"fence token {token} < current {current} for {resource}")


class MigrationError(SlotflowError):
    """A schema migration could not be applied."""


class MigrationDrift(MigrationError):
    """An applied migration file was edited after it ran; migrations are append-only."""


class PoisonMessage(SlotflowError):
    """A Kafka record that can never be processed as it is; it belongs in the DLQ."""

    reason: ClassVar[str] = "poison"


class UndecodableMessage(PoisonMessage):
    """The record's bytes are not a JSON envelope."""

    reason = "undecodable"


class MessageTooLarge(PoisonMessage):
    """The record is larger than slotflow accepts."""

    reason = "too_large"


class UnknownMessageType(PoisonMessage):
    """No model is registered for the envelope's (type, version)."""

    reason = "unknown_type"


class InvalidPayload(PoisonMessage):
    """The envelope's data does not validate against its model."""

    reason = "invalid_payload"


class PayloadNotFound(SlotflowError):
    """No payload is stored under this reference (`slotflow.workflow.payloads`, `slotflow.pg.payloads`)."""


class UnstorableValue(InvalidPayload):
    """A value holds what PostgreSQL cannot store (a NUL, a lone surrogate) or JSON cannot carry
    (NaN, Infinity): every service refuses it (`slotflow.contracts.acceptance`)."""


class NestingTooDeep(InvalidPayload):
    """A value nests deeper than `slotflow.contracts.codec.FIELD_MAX_DEPTH`: no consumer accepts it."""


class KeyMismatch(PoisonMessage):
    """The record key differs from the key the envelope claims."""

    reason = "key_mismatch"


class UnparkableRecord(PermanentError):
    """Not even a minimal dead letter for the record could be built or sent; it is skipped."""


class UnexpectedMessageType(PoisonMessage):
    """A valid message arrived on a topic whose consumer does not handle its type."""

    reason = "unexpected_type"


class UnprovenRecord(PoisonMessage):
    """Another service's event that its issuer's own record does not back (`slotflow.issuers`):
    parked in the DLQ with the rule it breaks, and nothing acts on it."""

    reason = "unproven"


class UnprovenOutcome(UnprovenRecord):
    """An activity outcome the claimer's record of its run does not back."""

    reason = "unproven_outcome"


class UnprovenTimer(UnprovenRecord):
    """A timer firing of no timer the workflow started and waits on, or before its time."""

    reason = "unproven_timer"


class UnprovenCancel(UnprovenRecord):
    """An activity cancel request the orchestrator's record does not back, or that names a run
    that is not that workflow's activity."""

    reason = "unproven_cancel"


class DownstreamUnavailable(TransientError):
    """A downstream the handler depends on failed or could not be reached."""

    def __init__(self, downstream: str, message: str | None = None) -> None:
        super().__init__(message or f"downstream {downstream!r} is unavailable")
        #: The downstream's name, as declared in ``@handler(..., downstreams=[...])``.
        self.downstream = downstream
