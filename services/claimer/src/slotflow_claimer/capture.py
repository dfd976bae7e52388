"""The log lines a handler writes during one attempt, kept with that attempt's outcome.

An operator looking at a failed run wants what the handler said while it ran, not a grep through
every claimer's log for the run id. One handler on the root logger appends each record to the
list of the attempt whose context it was logged in: the executor opens that list around the
handler call only, in the run's own task (a context variable, so concurrent runs on one loop do
not mix), and a plain `def` handler's thread inherits it through the copied context. A handler in
a process pool logs in another process and is not captured.

Bounded per attempt (lines and characters): the lines travel in RunFailed/RunCompleted and are
stored with the attempt, so a handler that logs in a loop must not grow a record past what its
topic takes. Past the bound the newest lines are dropped and one marker line says how many.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from slotflow.core.nul import storable

#: Per attempt. 200 lines of at most 500 characters is 100 KB at worst, well inside a run event.
MAX_LINES = 200
MAX_LINE_CHARS = 500
MAX_TOTAL_CHARS = 32_000

_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


@dataclass
class AttemptLog:
    """The lines of one attempt so far, and how many were dropped past the bound."""

    lines: list[str] = field(default_factory=list)
    chars: int = 0
    dropped: int = 0

    def add(self, line: str) -> None:
        # Storable: the lines travel in the run's event, whose consumers refuse a NUL or a lone
        # surrogate (the acceptance rule), and a handler may log any text.
        line = storable(line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…")
        if len(self.lines) >= MAX_LINES or self.chars + len(line) > MAX_TOTAL_CHARS:
            self.dropped += 1
            return
        self.lines.append(line)
        self.chars += len(line)

    def result(self) -> tuple[str, ...]:
        if self.dropped:
            return (*self.lines, f"... {self.dropped} more log lines of this attempt not kept")
        return tuple(self.lines)


_current: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar(
    "slotflow_attempt_log", default=None
)


class AttemptLogHandler(logging.Handler):
    """Appends a record to the attempt log of the context it was emitted in, if there is one."""

    def emit(self, record: logging.LogRecord) -> None:
        target = _current.get()
        if target is None:
            return
        try:
            text = _FORMAT.format(record)
        except Exception:  # noqa: BLE001 - a bad log call must not fail the handler that made it
            text = f"{record.levelname} {record.name}: {record.msg!r} (unformattable arguments)"
        # Multi-line records (exc_info) stay one entry per line for reading.
        for line in text.splitlines() or [""]:
            target.add(line)


_installed: AttemptLogHandler | None = None


def install() -> None:
    """Put the capturing handler on the root logger once per process."""
    global _installed
    if _installed is None:
        _installed = AttemptLogHandler(level=logging.DEBUG)
        logging.getLogger().addHandler(_installed)


@contextlib.contextmanager
def attempt_log() -> Iterator[AttemptLog]:
    """Capture what is logged in this context (and threads given a copy of it) until exit."""
    found = AttemptLog()
    token = _current.set(found)
    try:
        yield found
    finally:
        _current.reset(token)
