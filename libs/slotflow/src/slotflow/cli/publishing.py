"""Publish one command to Kafka from the command line, and optionally wait for its outcome.

The envelope is built and routed by `slotflow.commands` (the helper the api uses too), so a command
from the CLI is byte-for-byte what the same command over HTTP would be.
"""

import asyncio
import getpass
import time
from dataclasses import dataclass
from typing import Any

from slotflow.cli.api import ApiClient, path_segment
from slotflow.cli.errors import ApiRequestFailed, CommandRejected, KafkaUnreachable, UsageError
from slotflow.commands import InvalidCommandId, command_route, publish_command
from slotflow.contracts import Message
from slotflow.errors import (
    ConfigurationError,
    KafkaAccessDenied,
    KafkaAuthenticationFailed,
    TransientStorageError,
)
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings

SOURCE = "cli"
#: The API holds a status request open this long at most (`?wait=` is capped at 30 s).
MAX_WAIT_S = 30.0
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
        return body


def publish(
    settings: KafkaSettings, message: Message, *, command_id: str | None, timeout: float
) -> Published:
    """Send ``message`` to its command topic and return once the broker acknowledged it.

    Raises:
        UsageError: ``command_id`` is unusable.
        KafkaUnreachable: no broker acknowledged within ``timeout`` seconds.
    """
    route = command_route(message)
    try:
        sent = asyncio.run(_send(settings, message, command_id=command_id, timeout=timeout))
    except InvalidCommandId as err:
        raise UsageError(f"--command-id: {err}") from None
    key = route.key or sent
    return Published(sent, message.message_type, settings.topic(route.topic), key)


async def _send(settings: KafkaSettings, message: Message, *, command_id: str | None, timeout: float) -> str:
    secured = "check SLOTFLOW_KAFKA_SECURITY_PROTOCOL, SLOTFLOW_KAFKA_SASL_* and SLOTFLOW_KAFKA_SSL_*"
    try:
        producer = Producer(settings, client_id="cli", linger_ms=0)
    except ConfigurationError as err:
        raise KafkaUnreachable(f"{err}; {secured}") from None
    hint = "start the devstack (slotflow stack up) or set SLOTFLOW_KAFKA_BOOTSTRAP"
    try:
        async with asyncio.timeout(timeout):
            await producer.start()
    except (KafkaAuthenticationFailed, KafkaAccessDenied) as err:
        raise KafkaUnreachable(f"{err}; {secured}") from None
    except TransientStorageError as err:
        raise KafkaUnreachable(f"cannot reach Kafka at {settings.bootstrap}: {err}; {hint}") from None
    except TimeoutError:
        await producer.stop()
        raise KafkaUnreachable(
            f"Kafka at {settings.bootstrap} did not answer within {timeout:g} s; {hint}"
        ) from None
    try:
        async with asyncio.timeout(timeout):
            return await publish_command(
                producer, settings, message, command_id=command_id, source=SOURCE, principal=cli_principal()
            )
    except KafkaAccessDenied as err:
        raise KafkaUnreachable(f"{err}; the command was not written") from None
    except TransientStorageError as err:
        raise KafkaUnreachable(
            f"Kafka did not acknowledge the command: {err}; it may or may not have been written, "
            "so retry with the same --command-id to keep it applied once"
        ) from None
    except TimeoutError:
        topic = settings.topic(command_route(message).topic)
        raise KafkaUnreachable(
            f"Kafka did not acknowledge the command on {topic} within {timeout:g} s (does the topic exist? "
            "the devstack creates them); retry with the same --command-id to keep it applied once"
        ) from None
    finally:
        await producer.stop()


def cli_principal() -> str | None:
    """Who publishes a command straight to Kafka from this CLI: `cli:<login name>`.

    Informational: nothing authenticates it (whoever may write the command topics may write any
    principal); the api's principals are authenticated. None when the login name is unknown.
    """
    try:
        return f"cli:{getpass.getuser()}"[:300]
    except (OSError, KeyError):
        return None


def wait_for_outcome(api: ApiClient, published: Published, *, wait: float) -> Published:
    """Ask the API until the command is accepted or rejected, for up to ``wait`` seconds.

    Raises:
        CommandRejected: the owning service refused the command; its reason is the message.
        ApiUnavailable / ApiRequestFailed: the status could not be read (the command was published).
    """
    deadline = time.monotonic() + wait
    status: dict[str, Any] = {"status": "pending"}
    path = f"/v1/commands/{path_segment(published.command_id)}"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        step = min(remaining, MAX_WAIT_S)
        try:
            body = api.get(path, {"wait": f"{step:.1f}"}, timeout=step + 10.0)
        except ApiRequestFailed as err:
            # A server that does not know the id yet may say 404 rather than unknown; keep asking.
            if err.status != 404:
                raise
            body = {"status": "unknown"}
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
        if isinstance(body, dict):
            status = body
        if status.get("status") not in OPEN_STATUSES:
            break
    result = Published(
        published.command_id,
        published.command_type,
        published.topic,
        published.key,
        status=str(status.get("status")),
        reason=status.get("reason"),
    )
    if result.status == "rejected":
        raise CommandRejected(
            f"command {published.command_id} was rejected: {result.reason or 'no reason given'}"
        )
    return result
