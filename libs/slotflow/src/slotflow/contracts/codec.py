"""Bytes to envelope and back. The one place that knows the wire encoding (UTF-8 JSON).

It also holds the record size every producer and every consumer share (`DEFAULT_MAX_BYTES`), and
the nesting limit of a value in a message field (`FIELD_MAX_DEPTH`, the acceptance rule's
`VALUE_MAX_DEPTH`; `slotflow.contracts.acceptance` has the whole rule). Consumers parse with
pydantic-core, whose JSON parser stops at 200 levels ("recursion limit exceeded"); a value of 99
levels inside the deepest carrier (a JobDue in a retry's StartTimer, in the envelope) stays far
below that, so what the models let through always decodes.
"""

from typing import Any

from pydantic import ValidationError

from slotflow.contracts.acceptance import VALUE_MAX_DEPTH
from slotflow.contracts.envelope import Envelope
from slotflow.contracts.registry import _summarise
from slotflow.errors import MessageTooLarge, NestingTooDeep, UndecodableMessage

DEFAULT_MAX_BYTES = 1_048_576
#: Deepest nesting of a value held in a field of a message (a payload, a result, an input), its
#: own object or list being level 1; shared by every service.
FIELD_MAX_DEPTH = VALUE_MAX_DEPTH


def depth_of(value: Any) -> int:
    """How deeply ``value`` nests (a scalar is 0, ``{}`` and ``[]`` are 1); iterative, so any depth."""
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


def check_depth(value: Any, *, what: str = "the value", limit: int = FIELD_MAX_DEPTH) -> None:
    """Refuse ``value`` (a JSON value for a message field) nested deeper than ``limit``.

    Raises:
        NestingTooDeep: it is; every message carrying it would be refused.
    """
    depth = depth_of(value)
    if depth > limit:
        raise NestingTooDeep(
            f"{what} is nested {depth} levels deep; the limit is {limit} "
            "(the services that consume it refuse deeper values)"
        )


def encode(envelope: Envelope) -> bytes:
    """Serialise an envelope as compact UTF-8 JSON.

    An absent `principal` or `proof` is left out rather than written as null: records without
    one stay byte for byte what they were before the field existed.
    """
    absent = _ABSENT[(envelope.principal is None, envelope.proof is None)]
    if absent:
        return envelope.model_dump_json(exclude=absent).encode()
    return envelope.model_dump_json().encode()


#: The optional envelope fields to leave out, by (principal absent, proof absent).
_ABSENT: dict[tuple[bool, bool], set[str]] = {
    (True, True): {"principal", "proof"},
    (True, False): {"principal"},
    (False, True): {"proof"},
    (False, False): set(),
}


def decode(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Envelope:
    """Parse a record value into an envelope.

    Raises:
        MessageTooLarge: ``raw`` is longer than ``max_bytes``.
        UndecodableMessage: empty, not UTF-8, not JSON, or not shaped like an envelope.
    """
    if raw is None or len(raw) == 0:
        raise UndecodableMessage("empty record value (tombstone or missing payload)")
    if len(raw) > max_bytes:
        raise MessageTooLarge(f"record of {len(raw)} bytes exceeds the {max_bytes}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UndecodableMessage(f"record value is not UTF-8: {err}") from err
    try:
        return Envelope.model_validate_json(text)
    except ValidationError as err:
        raise UndecodableMessage(f"record value is not a slotflow envelope: {_summarise(err)}") from err
