"""The NUL character, which JSON and Kafka carry but PostgreSQL's text and jsonb cannot hold.

`find_nul` names where one is (for an error a person can act on, as the api's 422 does). Where a
value must be stored anyway (a dead letter, a rejection, an outcome), NUL becomes U+FFFD: `pg_text`
for a text column, `storable` for a text column or UTF-8 JSON (lone surrogates too), `scrub_nul`
for a JSON-ready value and `jsonb_text` for jsonb. The raw record bytes are kept elsewhere untouched.
"""

import json
from typing import Any

NUL = "\x00"
REPLACEMENT = "\ufffd"


def find_nul(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (or mapping key) in ``value`` holding a NUL, else None.

    The path of a top-level string is "" ; list items are named by index (``tags.2``).
    """
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = str(key).replace(NUL, "\\x00")
            where = f"{path}.{name}" if path else name
            if isinstance(key, str) and NUL in key:
                return where
            found = find_nul(item, where)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_nul(item, f"{path}.{index}" if path else str(index))
            if found is not None:
                return found
    return None


def pg_text(value: str) -> str:
    """``value`` storable in (and comparable with) a PostgreSQL text column."""
    return value.replace(NUL, REPLACEMENT)


def storable(text: str) -> str:
    """``text`` as PostgreSQL text and UTF-8 JSON can hold it: NUL and lone surrogates replaced.

    Ids and keys echoed from a hostile record end up in text columns (outbox, inbox) and in
    encoded envelopes; either refusal would make the very path that reports the record fail.
    """
    if NUL not in text and text.isascii():
        return text
    return text.encode("utf-8", errors="replace").decode("utf-8").replace(NUL, REPLACEMENT)


def scrub_nul(value: Any) -> Any:
    """``value`` with every NUL in its strings and keys replaced by U+FFFD (lists for tuples)."""
    if isinstance(value, str):
        return pg_text(value)
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_nul(v) for v in value]
    return value


def jsonb_text(value: Any) -> str:
    """``value`` (JSON-ready) as JSON text PostgreSQL's jsonb accepts: NUL anywhere replaced.

    jsonb refuses the escaped NUL too, and one would fail a whole batch's statement. The common
    case (no NUL) costs one dumps; only a value that has one is walked.
    """
    text = json.dumps(value)
    if "\\u0000" in text:
        text = json.dumps(scrub_nul(value))
    return text
