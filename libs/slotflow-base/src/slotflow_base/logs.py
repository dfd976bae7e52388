"""One logging set-up for every service process: plain text or JSON lines, aiokafka quiet.

Here in `slotflow_base` so the stats worker, which cannot import the library (decision 0005),
logs and masks exactly as every other service; `slotflow.logs` re-exports every name.

Environment (read at start-up, so the same settings reach every service):

- `SLOTFLOW_LOG_FORMAT`: `text` (default) or `json` (one object per line, for log shippers).
- `SLOTFLOW_LOG_LEVEL`: the services' level (default `INFO`).
- `SLOTFLOW_LOG_KAFKA_LEVEL`: aiokafka's own level (default `WARNING`): at INFO it narrates every
  connection, rebalance and coordinator change, which drowned what the service itself said.

A log call's `extra={...}` fields (run_id, attempt, error_type, ...) become keys of the JSON
object, and are appended as `key=value` to the text line, so both formats carry the same facts.

Secrets never reach the output: every line (message, extras, traceback) passes `redact`, which
masks the password of any URL-shaped DSN (`postgresql://user:***@host/db`), `password=...` in a
query string or conninfo, and every value given to `register_secret` (the PostgreSQL settings
register theirs when they are built, and so do the Kafka settings their passwords and token;
any other setting holding a token or key registers its value the same way). Uncaught exceptions
go through the same mask (`sys.excepthook`), and so does a library that installs handlers of its
own once `RedactingFilter` is on them.
"""

import json
import logging
import os
import re
import sys
import threading
import traceback
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO
from urllib.parse import unquote

from pydantic import SecretStr

from slotflow_base.errors import SlotflowError

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class BadLogSetting(SlotflowError):
    """A SLOTFLOW_LOG_* variable holds a value the set-up does not know."""


REDACTED = "***"
#: Registered values shorter than this are not masked by value: masking every "ab" in every line
#: would make logs unreadable. Such a password is still masked where it sits in a DSN.
MIN_SECRET_LENGTH = 4

# The password of a URL's userinfo: scheme://user:PASSWORD@host. The password runs to the last
# `@` before the host (an unencoded `@` in it still gets masked whole).
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@'\"]*:)(?P<secret>[^\s/?#'\"]+)(?=@)"
)
# `password=...` (and sslpassword) as a DSN query parameter or a libpq conninfo keyword.
_KEY_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?P<secret>'[^']*'|[^\s&'\",;]+)", re.IGNORECASE
)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_secrets_pattern: re.Pattern[str] | None = None


def register_secret(value: str | SecretStr | None) -> None:
    """Mask ``value`` wherever it appears in log output from now on (a token, a key, a password).

    Both the value and its percent-decoded form are registered, since a DSN carries it encoded.
    """
    global _secrets_pattern
    raw = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not raw:
        return
    forms = {raw, unquote(raw)}
    with _secrets_lock:
        new = {f for f in forms if len(f) >= MIN_SECRET_LENGTH} - _secrets
        if not new:
            return
        _secrets.update(new)
        # Longest first, so a secret that contains another is masked whole.
        ordered = sorted(_secrets, key=len, reverse=True)
        _secrets_pattern = re.compile("|".join(re.escape(s) for s in ordered))


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries (in its userinfo or as `password=`), if any."""
    for pattern in (_URL_PASSWORD, _KEY_PASSWORD):
        found = pattern.search(dsn)
        if found:
            return found.group("secret").strip("'")
    return None


def register_dsn(dsn: str) -> None:
    """Register the password a DSN carries, so it is masked even where it appears on its own."""
    register_secret(dsn_password(dsn))


def redact(text: str) -> str:
    """``text`` with DSN passwords and every registered secret replaced by `***`."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    text = _KEY_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    pattern = _secrets_pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return text


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact(str(value))


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
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # Masked before encoding: JSON escapes would otherwise hide a secret from the mask.
        return json.dumps(_redact_value(entry), ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The usual line, with the extras appended as `key=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = extra_fields(record)
        if extras:
            head, newline, rest = line.partition("\n")
            fields = " ".join(f"{k}={v}" for k, v in extras.items())
            line = f"{head} [{fields}]{newline}{rest}"
        return redact(line)


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message and arguments, for handlers whose formatter is not
    ours (a library that installs its own): the rendered message replaces msg and args."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redacting_excepthook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    """An uncaught exception's traceback, masked like every log line (its text may embed a DSN)."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, error, tb))))
    sys.stderr.flush()


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
    handler.addFilter(RedactingFilter())
    sys.excepthook = redacting_excepthook
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(chosen)
    logging.getLogger("aiokafka").setLevel(kafka_level)
