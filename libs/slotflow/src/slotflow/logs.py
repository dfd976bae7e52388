"""One logging set-up for every service process: plain text or JSON lines, aiokafka quiet.

Environment (read at start-up, so the same settings reach every service):

- `SLOTFLOW_LOG_FORMAT`: `text` (default) or `json` (one object per line, for log shippers).
- `SLOTFLOW_LOG_LEVEL`: the services' level (default `INFO`).
- `SLOTFLOW_LOG_KAFKA_LEVEL`: aiokafka's own level (default `WARNING`): at INFO it narrates every
  connection, rebalance and coordinator change, which drowned what the service itself said.

A log call's `extra={...}` fields (run_id, attempt, error_type, ...) become keys of the JSON
object, and are appended as `key=value` to the text line, so both formats carry the same facts.
"""

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from slotflow.errors import SlotflowError

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class BadLogSetting(SlotflowError):
    """A SLOTFLOW_LOG_* variable holds a value the set-up does not know."""


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed with `extra=`, in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the extras, and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **extra_fields(record),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The usual line, with the extras appended as `key=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = extra_fields(record)
        if not extras:
            return line
        head, newline, rest = line.partition("\n")
        fields = " ".join(f"{k}={v}" for k, v in extras.items())
        return f"{head} [{fields}]{newline}{rest}"


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (os.environ.get(name) or default).strip()
    chosen = value.upper() if allowed is LEVELS else value.lower()
    if chosen not in allowed:
        raise BadLogSetting(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return chosen


def configure_logging(*, level: str | None = None, stream: TextIO | None = None, force: bool = False) -> None:
    """Set up the root logger from SLOTFLOW_LOG_* (``level`` overrides SLOTFLOW_LOG_LEVEL).

    Like `logging.basicConfig`, it leaves a root logger that already has handlers alone (an
    entry point called inside a host that set up logging, pytest among them, must not take
    its output away) unless ``force`` is given.

    Raises:
        BadLogSetting: a variable holds an unknown format or level.
    """
    fmt = _choice("SLOTFLOW_LOG_FORMAT", "text", FORMATS)
    chosen = level.upper() if level else _choice("SLOTFLOW_LOG_LEVEL", "INFO", LEVELS)
    kafka_level = _choice("SLOTFLOW_LOG_KAFKA_LEVEL", "WARNING", LEVELS)
    root = logging.getLogger()
    if root.handlers and not force:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen)
    logging.getLogger("aiokafka").setLevel(kafka_level)
