"""What `slotflow.client` raises: one class per way a call can fail, all `SlotflowError`s.

Branch on the class, never on the message text::

    try:
        await client.pause_schedule("nightly-payouts", wait=10)
    except CommandRejected as err:
        print("refused:", err.reason)
    except NotAuthorized:
        print("check SLOTFLOW_TOKEN")
"""

from slotflow.errors import PermanentError, SlotflowError, TransientError


class ClientError(SlotflowError):
    """A slotflow client call failed."""

    #: The api's HTTP status when the api answered with this error, else None.
    status: int | None = None
    #: The api's `detail` flattened to text, with `(HTTP n)`, when the api answered, else None.
    detail: str | None = None


class InvalidRequest(ClientError, PermanentError):
    """The request is malformed: a bad field, an unusable command id (the api's 422, or refused before sending)."""


class NotAuthorized(ClientError, PermanentError):
    """The api refused the call: no token, or an unknown, revoked or expired one (HTTP 401)."""


class Forbidden(NotAuthorized):
    """The token is valid but lacks the scope the call needs (HTTP 403); the message names it."""


class NotFound(ClientError, PermanentError):
    """No such schedule, run, workflow or command (HTTP 404)."""


class Conflict(ClientError, PermanentError):
    """The api refused the request as conflicting with what exists (HTTP 409 outside a command's wait)."""


class CommandRejected(ClientError, PermanentError):
    """The service that owns the command refused it; `reason` says why."""

    def __init__(self, command_id: str, reason: str | None) -> None:
        #: The rejected command's id.
        self.command_id = command_id
        #: Why the owning service refused it (from its CommandRejected event).
        self.reason = reason or "no reason given"
        super().__init__(f"command {command_id} was rejected: {self.reason}")


class WaitTimedOut(ClientError, TransientError):
    """The command's outcome did not arrive in time; it may still be applied (wait again)."""

    def __init__(self, command_id: str, last_status: str, seconds: float) -> None:
        self.command_id = command_id
        #: The last status seen (`unknown`, `pending`).
        self.last_status = last_status
        super().__init__(f"command {command_id} is still {last_status} after {seconds:g} s")


class Unavailable(ClientError, TransientError):
    """The api or Kafka did not answer (or answered 5xx); retrying a command with the same id is safe."""


class ApiError(ClientError):
    """The api answered with an error status the other classes do not cover."""


class BrokerUnreachable(Unavailable):
    """No Kafka broker answered when the Kafka transport connected."""


class ReadsNeedHttp(ClientError, PermanentError):
    """Reads (runs, workflows, schedules, a command's status by id) go through the api: give the
    client an `HttpTransport` for them."""
