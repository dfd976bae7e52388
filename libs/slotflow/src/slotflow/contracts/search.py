"""Memo and typed search attributes: what a StartWorkflow and the history carry (docs/workflows.md).

A **memo** is any JSON object the workflow carries for the people who look at it: stored with the
start, shown by the api, never indexed. **Search attributes** are typed values the read model
indexes, so `list_workflows(query=...)` can find a workflow by them. Each travels typed, as
`{"type": "int", "value": 3}`: JSON alone cannot tell an instant from a string, or 3.0 from 3, and
the read model compares a value as its type says. Python values are typed by `search_attribute`
(str → keyword, bool, int, float, aware datetime, a list of str → keyword_list); `text` is asked for
explicitly (`SearchAttribute(type="text", value=...)`).

The limits (`MAX_*` below) hold wherever attributes enter: a StartWorkflow that breaks them is
refused at decode (the api answers 422, the client raises before sending, a record on the topic
goes to the DLQ with the validation error), and `workflow.upsert_search_attributes` raises in the
workflow code.
"""

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

V = TypeVar("V")

#: The types a search attribute can have (Temporal's Keyword, Text, Int, Double, Bool, Datetime,
#: KeywordList).
SearchAttributeType = Literal["keyword", "text", "int", "float", "bool", "datetime", "keyword_list"]

#: How a custom attribute may be named: a letter, then letters, digits and `_` (at most 64).
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
#: The built-in fields of the filter language (Temporal's names): no custom attribute takes them.
BUILT_IN_NAMES = frozenset({"WorkflowId", "WorkflowType", "ExecutionStatus", "StartTime", "CloseTime"})
#: Words of the filter language, in any case: no custom attribute takes them either.
RESERVED_WORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false", "between"})

#: At most this many search attributes on one workflow (its start's and its upserts' together).
MAX_SEARCH_ATTRIBUTES = 32
#: The longest keyword or text value, and the longest item of a keyword list (characters).
MAX_STRING_LENGTH = 2_000
#: The most items of one keyword list.
MAX_LIST_ITEMS = 100
#: The most bytes of a workflow's search attributes as compact JSON (Temporal's default is 40 KB).
MAX_SEARCH_ATTRIBUTES_BYTES = 40_000
#: The most bytes of a memo as compact JSON.
MAX_MEMO_BYTES = 32_768
#: An int attribute is a signed 64-bit integer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SearchAttributeName = Annotated[str, Field(pattern=NAME_PATTERN)]


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a custom search attribute, or None when it can."""
    if re.match(NAME_PATTERN, name) is None:
        return f"{name!r} is not a search attribute name (a letter, then letters, digits or _, at most 64)"
    if name in BUILT_IN_NAMES:
        return f"{name!r} is a built-in field, not a custom search attribute"
    if name.lower() in RESERVED_WORDS:
        return f"{name!r} is a word of the query language"
    return None


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > MAX_STRING_LENGTH:
        raise ValueError(f"{what} is longer than {MAX_STRING_LENGTH} characters")
    return value


class SearchAttribute(BaseModel):
    """One typed search attribute value: `{"type": "keyword", "value": "acme"}`.

    `datetime` values are aware instants (ISO 8601 with an offset in JSON); `float` values are
    finite; `int` values fit 64 bits; `keyword_list` is a list of strings (a query's `=` matches a
    list that holds the value).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: SearchAttributeType
    value: str | bool | int | float | datetime | list[str]

    @field_validator("value", mode="before")
    @classmethod
    def _typed(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is None:
            return value
        if kind in ("keyword", "text"):
            return _string(value, f"a {kind} value")
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"a bool value must be true or false, not {type(value).__name__}")
            return value
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"an int value must be an integer, not {type(value).__name__}")
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueError("an int value must fit 64 bits")
            return value
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"a float value must be a number, not {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError("a float value must be finite")
            return float(value)
        if kind == "datetime":
            if isinstance(value, str):
                try:
                    value = datetime.fromisoformat(value)
                except ValueError:
                    raise ValueError(f"a datetime value must be ISO 8601, not {value[:40]!r}") from None
            if not isinstance(value, datetime) or value.utcoffset() is None:
                raise ValueError("a datetime value must be an instant with its offset (timezone-aware)")
            return value
        # keyword_list
        if not isinstance(value, list | tuple):
            raise ValueError(f"a keyword_list value must be a list of strings, not {type(value).__name__}")
        if len(value) > MAX_LIST_ITEMS:
            raise ValueError(f"a keyword_list holds at most {MAX_LIST_ITEMS} items")
        return [_string(item, "a keyword_list item") for item in value]


def search_attribute(value: Any) -> SearchAttribute:
    """``value`` typed: a `SearchAttribute` as is, `{"type": ..., "value": ...}` validated, else by its
    Python type (bool, int, float, str → keyword, aware datetime, list of str → keyword_list).

    Raises:
        ValueError: a value of no search attribute type (None, a dict, a naive datetime, ...).
    """
    if isinstance(value, SearchAttribute):
        return value
    if isinstance(value, Mapping) and set(value) == {"type", "value"}:
        return SearchAttribute.model_validate(dict(value))
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "int"
    elif isinstance(value, float):
        kind = "float"
    elif isinstance(value, str):
        kind = "keyword"
    elif isinstance(value, datetime):
        kind = "datetime"
    elif isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        kind = "keyword_list"
    else:
        raise ValueError(
            f"{type(value).__name__} is no search attribute type (str, bool, int, float, an aware "
            'datetime, a list of str, or {"type": ..., "value": ...})'
        )
    return SearchAttribute(type=kind, value=value)  # type: ignore[arg-type]


def typed_search_attributes(values: Mapping[str, Any] | None) -> dict[str, SearchAttribute]:
    """Every entry of ``values`` typed by `search_attribute`, names checked, limits held.

    Raises:
        ValueError: a bad name, a value of no type, or a limit passed (the message names the attribute).
    """
    typed: dict[str, SearchAttribute] = {}
    for name, value in (values or {}).items():
        problem = name_problem(str(name))
        if problem is not None:
            raise ValueError(problem)
        try:
            typed[name] = search_attribute(value)
        except ValueError as err:
            raise ValueError(f"search attribute {name!r}: {_first_line(err)}") from None
    check_search_attributes(typed)
    return typed


def _first_line(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    if callable(errors):
        first = errors()[0]
        return str(first.get("msg", err)).removeprefix("Value error, ")
    return str(err)


def check_search_attributes(attributes: Mapping[str, SearchAttribute]) -> None:
    """The limits of a workflow's whole set of search attributes.

    Raises:
        ValueError: a bad name, more than `MAX_SEARCH_ATTRIBUTES`, or more than
            `MAX_SEARCH_ATTRIBUTES_BYTES` as JSON.
    """
    for name in attributes:
        problem = name_problem(name)
        if problem is not None:
            raise ValueError(problem)
    if len(attributes) > MAX_SEARCH_ATTRIBUTES:
        raise ValueError(
            f"a workflow has at most {MAX_SEARCH_ATTRIBUTES} search attributes, not {len(attributes)}"
        )
    size = len(compact(dump_search_attributes(attributes)))
    if size > MAX_SEARCH_ATTRIBUTES_BYTES:
        raise ValueError(
            f"search attributes take {size} bytes as JSON; at most {MAX_SEARCH_ATTRIBUTES_BYTES}"
        )


def check_memo(memo: Mapping[str, Any]) -> None:
    """A memo's limit.

    Raises:
        ValueError: more than `MAX_MEMO_BYTES` as JSON, or no JSON at all.
    """
    try:
        size = len(compact(memo))
    except (TypeError, ValueError) as err:
        raise ValueError(f"a memo must be JSON: {err}") from None
    if size > MAX_MEMO_BYTES:
        raise ValueError(f"the memo takes {size} bytes as JSON; at most {MAX_MEMO_BYTES}")


def compact(value: Any) -> bytes:
    """``value`` as compact, key-sorted JSON (what the limits measure)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


def dump_search_attributes(attributes: Mapping[str, SearchAttribute | None]) -> dict[str, Any]:
    """JSON-ready typed form: `{"Customer": {"type": "keyword", "value": "acme"}}` (None stays None)."""
    return {
        name: (attribute.model_dump(mode="json") if attribute is not None else None)
        for name, attribute in attributes.items()
    }


def merged(current: Mapping[str, V], updates: Mapping[str, V | None]) -> dict[str, V]:
    """``current`` after an upsert of ``updates``: a value sets its entry, None removes it (search
    attributes, and a memo's fields)."""
    out = dict(current)
    for name, attribute in updates.items():
        if attribute is None:
            out.pop(name, None)
        else:
            out[name] = attribute
    return out


def plain_values(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The typed JSON form (`dump_search_attributes`) as plain values: a datetime for `datetime`."""
    out: dict[str, Any] = {}
    for name, entry in attributes.items():
        if isinstance(entry, Mapping) and "value" in entry:
            out[name] = search_attribute(dict(entry)).value
        else:
            out[name] = entry
    return out
