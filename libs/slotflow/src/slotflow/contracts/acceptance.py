"""The acceptance rule: what one slotflow service accepts, every service that stores it can store.

JSON and Kafka carry things PostgreSQL refuses, and each service used to find out on its own: the
ticker stored a schedule whose payload held a NUL (its `json` column keeps the escape) and fired it,
while the api's `jsonb` refused the same schedule, parked its ScheduleCreated, and showed nothing;
an id of 1000 CJK characters passed every length check and then broke the btree index of whichever
table keyed it. So the message models refuse, in the same words everywhere a message is built or
decoded (the api, the CLI, the SDK, and every consumer through `slotflow.kafka.poison.decode_record`):

- a NUL (U+0000) in any string or mapping key, anywhere in a message or its envelope: PostgreSQL's
  text, `json` and `jsonb` cannot hold it; nor a lone surrogate, which is no UTF-8 at all (JSON
  from the wire cannot carry one, but a value built in Python can);
- a number that is not finite (`NaN`, `Infinity`, or a literal such as `1e400` that overflows):
  JSON has no such number and PostgreSQL's `json` and `jsonb` refuse it;
- a JSON value held in a field (a payload, an input, a result, a patch) nested deeper than
  `VALUE_MAX_DEPTH` levels, the value's own object or list being level 1. A value travels inside
  carriers of fixed depth (a JobDue inside a retry's StartTimer is three levels down), so every
  record stays far below pydantic-core's 200-level parse limit whatever carries it;
- an identifier over `ID_MAX_BYTES` UTF-8 bytes (envelope ids and keys, run, timer and command
  ids; a topic, a reason, a job id a consumer indexes): each is the key of a btree index
  somewhere, and an entry over 2704 bytes is refused;
- an integer outside the range of the column it is stored in (`INT4_MAX` for attempts, sequences
  and partitions, `INT8_MAX` for fence tokens and offsets): the fields say so in their schema;
- an instant that is not within the years 1 to 9999 in UTC (`0001-01-01T00:00:00+14:00` is in
  year 0 there): run ids, windows and columns are all UTC.

Identifiers users choose (schedule ids, workflow ids, handler names) also follow their patterns
(`slotflow.contracts.envelope.IDENTIFIER_PATTERN`). A refusal names the field
(`definition.payload.note: contains a NUL character (U+0000), which PostgreSQL cannot store`), so
a command is answered with a CommandRejected or a dead letter saying so, and a request with a 422.

The check costs one serialisation of the message by pydantic-core and a few byte scans (about
7 us for a JobDue); only a message those scans find suspicious (an escaped NUL, a `NaN`, an instant
at the edge of the years, more brackets than the limit, which strings may also hold) is walked
field by field for the exact answer. A service reading back facts it stored itself validates them
with `STORED` as the validation context, which skips the check: they were accepted when they were
stored, under whatever rule held then.
"""

import math
import re
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import BaseModel
from pydantic_core import PydanticCustomError, to_json

from slotflow.errors import NestingTooDeep, UnstorableValue

NUL: Final = "\x00"
#: The deepest a JSON value held in a message field nests; its own object or list is level 1.
VALUE_MAX_DEPTH: Final = 99
#: The most UTF-8 bytes an identifier may take: a btree index entry holds at most 2704 bytes, and
#: some indexes pair an id with a topic name or a second id.
ID_MAX_BYTES: Final = 1000
#: Integers stored in PostgreSQL `integer` and `bigint` columns (attempts, sequences, partitions;
#: fence tokens, offsets): a typed message field holding one is bounded to its column's range.
INT4_MAX: Final = 2**31 - 1
INT8_MAX: Final = 2**63 - 1
#: A record timestamp (ms since the epoch) a `datetime` can hold: up to 9999-12-31.
TIMESTAMP_MS_MAX: Final = 253_402_300_799_999
#: Validation context for facts a service reads back from its own storage (see the module docstring).
STORED_KEY: Final = "slotflow_stored"
STORED: Final = {STORED_KEY: True}
#: The pydantic error type of a refusal (the api renders it as its message alone: it names the field).
ERROR_TYPE: Final = "slotflow_unacceptable"

#: Characters an identifier never holds: control characters (a NUL, a newline) make ids that
#: look like others in a log, a URL or a terminal (`slotflow.contracts.identity` refuses them).
ID_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")

_NUL_ESCAPE = b"\\u0000"
_REPLACEMENT_UTF8 = "\ufffd".encode()


class _Refused(Exception):
    """Internal: the walk found what the rule refuses; the message names the field."""

    def __init__(self, message: str, *, too_deep: bool = False) -> None:
        super().__init__(message)
        self.too_deep = too_deep


def refusal(message: BaseModel) -> str | None:
    """Why ``message`` breaks the acceptance rule (the field and the problem), or None."""
    try:
        text = to_json(message)
    except ValueError:  # nested past what the serialiser goes (about 255 levels), or a surrogate
        return _walk_refusal(message)
    # One serialisation and a few byte scans (measured cheaper than a look at each field, since
    # durations serialise through Python either way); the scans over-approximate (a string may
    # hold "NaN" or brackets), and only what they flag is walked for the exact answer.
    if (
        _NUL_ESCAPE in text
        # pydantic-core writes a lone surrogate inside a model as U+FFFD (bytes EF BF BD) where
        # to_json of the value alone raises: the walk tells it from a real U+FFFD.
        or _REPLACEMENT_UTF8 in text
        or b"NaN" in text
        or b"Infinity" in text
        or b'"0001-' in text
        or b'"9999-' in text
        or text.count(b"{") + text.count(b"[") > VALUE_MAX_DEPTH
    ):
        return _walk_refusal(message)
    return None


def check(message: BaseModel) -> None:
    """Refuse ``message`` when it breaks the rule, as a pydantic error a model validator raises.

    Raises:
        PydanticCustomError: of type `ERROR_TYPE`, its message naming the field.
    """
    why = refusal(message)
    if why is not None:
        raise PydanticCustomError(ERROR_TYPE, "{why}", {"why": why})


def check_value(value: Any, what: str, *, limit: int = VALUE_MAX_DEPTH) -> None:
    """Refuse the JSON value ``value`` (for a message field; ``what`` names it in the error).

    Raises:
        NestingTooDeep: it nests deeper than ``limit``.
        UnstorableValue: it holds a NUL, a lone surrogate or a number that is not finite.
    """
    try:
        _check_value(value, what, limit)
    except _Refused as refused:
        if refused.too_deep:
            raise NestingTooDeep(str(refused)) from None
        raise UnstorableValue(str(refused)) from None


def text_refusal(text: str, where: str) -> str | None:
    """Why the string ``text`` (at ``where``) cannot be stored, or None."""
    if NUL in text:
        return _nul_words(where)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where or '(value)'}: contains a lone surrogate, which is not UTF-8; remove it"
    return None


def id_refusal(text: str, where: str, *, limit: int = ID_MAX_BYTES) -> str | None:
    """Why the identifier ``text`` (at ``where``) breaks the rule, or None."""
    if NUL in text:
        return _nul_words(where)
    # Four bytes a character at most: most ids are decided without encoding them.
    if len(text) * 4 > limit and len(text.encode("utf-8", errors="surrogatepass")) > limit:
        size = len(text.encode("utf-8", errors="surrogatepass"))
        return f"{where}: is {size} bytes as UTF-8; an identifier may take at most {limit}"
    return None


def within_id_bytes(text: str) -> str:
    """A field validator: ``text`` unchanged when it fits `ID_MAX_BYTES`.

    Raises:
        ValueError: it does not (pydantic reports it against the field).
    """
    if len(text) * 4 > ID_MAX_BYTES:
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > ID_MAX_BYTES:
            raise ValueError(f"is {size} bytes as UTF-8; an identifier may take at most {ID_MAX_BYTES}")
    return text


def _nul_words(where: str) -> str:
    return (
        f"{where or '(value)'}: contains a NUL character (U+0000), which PostgreSQL cannot store; remove it"
    )


def _join(path: str, name: object) -> str:
    # Shown as it can be printed and encoded: a NUL as \x00, a lone surrogate as \udXXX (a
    # refusal quoting it raw could not itself be rendered or sent).
    shown = str(name).replace(NUL, "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{path}.{shown}" if path else shown


def _walk_refusal(message: BaseModel) -> str | None:
    try:
        _walk_model(message, "")
    except _Refused as refused:
        return str(refused)
    return None


def _walk_model(model: BaseModel, path: str) -> None:
    for name in type(model).model_fields:
        _walk_field(getattr(model, name), _join(path, name))


def _walk_field(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        _walk_model(value, path)
    elif isinstance(value, list | tuple) and any(isinstance(item, BaseModel) for item in value):
        for index, item in enumerate(value):
            _walk_field(item, _join(path, index))
    elif isinstance(value, dict | list | tuple):
        _check_value(value, path, VALUE_MAX_DEPTH)
    elif isinstance(value, str):
        why = text_refusal(value, path)
        if why is not None:
            raise _Refused(why)
    elif isinstance(value, float) and not math.isfinite(value):
        raise _Refused(f"{path}: is {value}, which is not a JSON number; use a finite number")
    elif isinstance(value, datetime):
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise _Refused(f"{path}: {value.isoformat()} is not within the years 1 to 9999 in UTC") from None


def _check_value(value: Any, path: str, limit: int) -> None:
    """Depth first, then NUL and non-finite numbers, all without recursion (any depth)."""
    deepest = 0
    stack: list[tuple[Any, int, str]] = [(value, 1, path)]
    found: str | None = None
    while stack:
        item, level, where = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            for key, child in item.items():
                child_path = _join(where, key)
                if found is None and isinstance(key, str):
                    found = text_refusal(key, child_path)
                stack.append((child, level + 1, child_path))
        elif isinstance(item, list | tuple):
            deepest = max(deepest, level)
            stack.extend((child, level + 1, _join(where, i)) for i, child in enumerate(item))
        elif found is None and isinstance(item, str):
            found = text_refusal(item, where)
        elif found is None and isinstance(item, float) and not math.isfinite(item):
            found = f"{where}: holds {item}, which is not a JSON number; use a finite number"
        if deepest > limit:
            # Measured to the end, so the answer says how deep it is, not only that it is too deep.
            raise _Refused(
                f"{path}: is nested {_depth(value)} levels deep; the limit is {limit}", too_deep=True
            )
    if found is not None:
        raise _Refused(found)


def _depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest
