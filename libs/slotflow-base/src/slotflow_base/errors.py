"""The base of every error slotflow raises, shared by the library and the stats worker.

The library's hierarchy (`slotflow.errors`) derives from `SlotflowError` and re-exports it; the
stats worker, which cannot import the library, derives its own errors from it too, so one
`except SlotflowError` catches what any slotflow code raises on purpose.
"""

from typing import ClassVar


class SlotflowError(Exception):
    """Unexpected slotflow error."""

    retryable: ClassVar[bool] = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class ConfigurationError(SlotflowError):
    """A setting is missing or has an impossible value."""
