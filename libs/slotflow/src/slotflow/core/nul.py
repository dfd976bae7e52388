"""The NUL character, which JSON and Kafka carry but PostgreSQL's text and jsonb cannot hold.

`find_nul` names where one is (for an error a person can act on); `scrub_nul` replaces each with
U+FFFD where a value must be stored anyway (the original bytes stay in the raw record).
"""

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


def scrub_nul(value: Any) -> Any:
    """``value`` with every NUL in its strings and keys replaced by U+FFFD (lists for tuples)."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, dict):
        return {scrub_nul(k): scrub_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_nul(v) for v in value]
    return value
