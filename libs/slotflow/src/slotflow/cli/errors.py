"""What the CLI can fail with, and the exit code each maps to (2: usage, 1: failure)."""

from typing import ClassVar

from slotflow.errors import SlotflowError

DEFAULT_API_URL = "http://127.0.0.1:8080"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(SlotflowError):
    """The command could not be carried out."""

    exit_code: ClassVar[int] = EXIT_FAILURE


class UsageError(CliError):
    """The command line itself is wrong: a bad flag value, invalid cron, bad JSON."""

    exit_code = EXIT_USAGE


class ApiUnavailable(CliError):
    """The read-model API did not answer."""


class ApiRequestFailed(CliError):
    """The API answered with an error status."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(detail)


class KafkaUnreachable(CliError):
    """No Kafka broker accepted the command."""


class CommandRejected(CliError):
    """The service that owns the command refused it."""


class AuditFindings(CliError):
    """`audit --check` found missed or duplicated slots."""
