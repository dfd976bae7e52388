"""Send one command from the command line, and optionally wait for its outcome.

By default through the api (`submit_via_api`), with the caller's token: the api checks the token's
scope for the command's route, signs the command with its own key and names the caller. With
`--via kafka` straight to Kafka (`publish`), signed with the caller's registered key, which every
consuming service checks where signatures are required. Either way the envelope is built and
routed by `slotflow.contracts.routing`, the helper the api uses too.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from slotflow.cli.api import ApiClient
from slotflow.cli.errors import ApiRequestFailed, CliError, CommandRejected, KafkaUnreachable, UsageError
from slotflow.client import (
    BrokerUnreachable,
    InvalidRequest,
    KafkaTransport,
    NotAuthorized,
    Sent,
    Unavailable,
)
from slotflow.client._kafka import login_principal
from slotflow.contracts import Message
from slotflow.contracts.routing import InvalidCommandId, check_command_id, command_route
from slotflow.principals import Signer
from slotflow.settings import KafkaSettings

SOURCE = "cli"
#: Statuses that may still change: not yet seen on its topic, or seen and awaiting its consumer.
OPEN_STATUSES = frozenset({"unknown", "pending"})


@dataclass(frozen=True, slots=True)
class Published:
    """What the CLI reports after a command reached its topic."""

    command_id: str
    command_type: str
    topic: str
    key: str
    status: str | None = None
    reason: str | None = None
    #: What its consumer said it did (a DLQ command: "redrove 3 dead letter(s); ...").
    summary: str | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "command_id": self.command_id,
            "type": self.command_type,
            "topic": self.topic,
            "key": self.key,
        }
        if self.status is not None:
            body["status"] = self.status
            body["reason"] = self.reason
        if self.summary is not None:
            body["summary"] = self.summary
        return body


def _checked_command_id(command_id: str | None) -> None:
    if command_id is not None:
        try:
            check_command_id(command_id)
        except InvalidCommandId as err:
            raise UsageError(f"--command-id: {err}") from None


def submit_via_api(
    api: ApiClient, settings: KafkaSettings, message: Message, *, command_id: str | None, select_all: bool
) -> Published:
    """Send ``message`` through the api's route for it, with the caller's token; return once the
    api published it.

    Raises:
        UsageError: ``command_id`` is unusable.
        CliError: the api refused it (a 401 without a good token, a 403 for a token without the
            command's scope, a 422, ...) or did not answer; the message says which and what to do.
    """
    _checked_command_id(command_id)
    route = command_route(message)
    try:
        sent = api.run(api.transport.send(message, command_id=command_id, select_all=select_all))
    except ApiRequestFailed as err:
        if err.status == 403:
            raise CliError(
                f"{err.detail}; the api refused the {message.message_type} command, nothing was sent: "
                "use a token with that scope (`slotflow token create`), or `--via kafka` with a signing "
                "key registered with it"
            ) from None
        raise
    return Published(
        sent.command_id, message.message_type, settings.topic(route.topic), route.key or sent.command_id
    )


def publish(
    settings: KafkaSettings, message: Message, *, command_id: str | None, timeout: float, signer: Signer
) -> Published:
    """Sign ``message`` with ``signer`` and send it to its command topic
    (`slotflow.client.KafkaTransport`); return once the broker acknowledged it.

    Raises:
        UsageError: ``command_id`` is unusable.
        KafkaUnreachable: no broker acknowledged within ``timeout`` seconds.
    """
    _checked_command_id(command_id)
    try:
        sent = asyncio.run(_send(settings, message, command_id=command_id, timeout=timeout, signer=signer))
    except BrokerUnreachable as err:
        raise KafkaUnreachable(
            f"{err}; start the devstack (slotflow stack up) or set SLOTFLOW_KAFKA_BOOTSTRAP"
        ) from None
    except (Unavailable, NotAuthorized, InvalidRequest) as err:
        # A refused login or ACL, or security settings that contradict each other: the message
        # names what to check (the transport's wording).
        raise KafkaUnreachable(str(err)) from None
    return Published(sent.command_id, message.message_type, sent.topic or "", sent.key or sent.command_id)


async def _send(
    settings: KafkaSettings, message: Message, *, command_id: str | None, timeout: float, signer: Signer
) -> Sent:
    # The CLI's --wait asks the api (which may be the only thing the operator can reach besides
    # Kafka), so the transport need not note where the acknowledgement will be.
    async with KafkaTransport(
        settings,
        source=SOURCE,
        principal=cli_principal() or "",
        timeout=timeout,
        client_id="cli",
        retry_with="the same --command-id",
        signer=signer,
    ) as kafka:
        return await kafka.send(message, command_id=command_id, track=False)


def cli_principal() -> str | None:
    """The informational principal of an unsigned command (`cli:<login name>`); a signed one
    carries its key's principal instead. None when the login name is unknown."""
    return login_principal("cli")


def wait_for_outcome(api: ApiClient, published: Published, *, wait: float) -> Published:
    """Ask the API until the command is accepted or rejected, for up to ``wait`` seconds.

    Raises:
        CommandRejected: the owning service refused the command; its reason is the message.
        ApiUnavailable / ApiRequestFailed: the status could not be read (the command was published).
    """
    status = api.run(api.transport.wait(published.command_id, timeout=wait))
    result = Published(
        published.command_id,
        published.command_type,
        published.topic,
        published.key,
        status=status.status,
        reason=status.reason,
        summary=status.summary,
    )
    if result.status == "rejected":
        raise CommandRejected(
            f"command {published.command_id} was rejected: {result.reason or 'no reason given'}"
        )
    return result
