"""The workflow list's filter language (`GET /v1/workflows?query=...`, docs/api.md "Listing
workflows by a query"): parsed into a tree, then into one `Filters` condition.

Grammar (keywords in any case; names case-sensitive)::

    query      := or_expr
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := term ( AND term )*
    term       := '(' or_expr ')' | condition
    condition  := name op literal
                | name [NOT] IN '(' literal ( ',' literal )* ')'
                | name IS [NOT] NULL
    op         := '=' | '!=' | '<>' | '<' | '<=' | '>' | '>='
    literal    := 'text' (a quote doubled inside: 'O''Brien') | "text" | number | TRUE | FALSE
    name       := a letter, then letters, digits or _ : a built-in field or a custom attribute

Built-in fields (Temporal's names): `WorkflowId`, `WorkflowType`, `ExecutionStatus` (a status,
slotflow's or Temporal's spelling: `'Running'`, `'completed'`, `'Canceled'`), `StartTime` and
`CloseTime` (an ISO 8601 instant with its offset). Any other name is a custom search attribute,
compared as its stored type says: a number with int and float attributes, a string with keyword and
text ones (and a keyword list holding it, for `=` and `IN`) and, when it is an ISO instant, with
datetime ones; TRUE and FALSE with bool ones. A condition never matches a workflow whose attribute
is missing or of a type the literal does not compare with; `!=` and `NOT IN` match one that has it
with another value.

Safety: the SQL text is put together only from the fixed condition templates below, AND, OR and
parentheses; every name and value travels as a `$n` parameter. Errors (`QueryError`) say where
(1-based character position) and what, and the route answers them with a 400.
"""

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from slotflow.errors import PermanentError
from slotflow.history.fold import STATUSES
from slotflow.pg.statements import Filters

#: The longest query the route takes (characters).
MAX_QUERY_LENGTH = 2_000
#: The most conditions one query holds.
MAX_CONDITIONS = 64
#: The deepest nesting of parentheses.
MAX_DEPTH = 16
#: The most values of one IN list.
MAX_IN_VALUES = 100

# -- the conditions, each with `{}` where a parameter goes --------------------------------------
#
# A custom attribute is read typed: the CASE yields NULL unless the stored type is one the
# comparison takes, so a keyword is never cast to a number or an instant (a cast error would fail
# the whole request), and a NULL never matches.

#: The attribute's value as a number (int and float attributes), else NULL.
_NUMBER_OF = (
    "(CASE WHEN w.search_attributes -> {}::text ->> 'type' IN ('int', 'float') "
    "THEN (w.search_attributes -> {}::text ->> 'value')::numeric END)"
)
#: The attribute's value as text (keyword and text attributes), else NULL.
_STRING_OF = (
    "(CASE WHEN w.search_attributes -> {}::text ->> 'type' IN ('keyword', 'text') "
    "THEN w.search_attributes -> {}::text ->> 'value' END)"
)
#: The attribute's value as an instant (datetime attributes), else NULL.
_DATETIME_OF = (
    "(CASE WHEN w.search_attributes -> {}::text ->> 'type' = 'datetime' "
    "THEN (w.search_attributes -> {}::text ->> 'value')::timestamptz END)"
)
#: The row holds the attributes `{}` (a jsonb document): served by the GIN index.
_CONTAINS = "w.search_attributes @> {}::jsonb"
#: The attribute is set, with one of the types `{}` (a text[]).
_HAS_TYPED = "COALESCE(w.search_attributes -> {}::text ->> 'type' = ANY({}::text[]), false)"
#: The attribute is set, whatever its type.
_HAS = "COALESCE(w.search_attributes ? {}::text, false)"

#: The built-in fields: their column, and what their literal is.
_BUILT_IN: dict[str, tuple[str, Literal["string", "status", "instant"]]] = {
    "WorkflowId": ("w.workflow_id", "string"),
    "WorkflowType": ("w.workflow_type", "string"),
    "ExecutionStatus": ("w.status", "status"),
    "StartTime": ("COALESCE(w.started_at, w.requested_at)", "instant"),
    "CloseTime": ("w.ended_at", "instant"),
}
#: SQL's spelling of each operator of the language.
_SQL_OPERATOR = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
#: Slotflow's statuses (the api's `requested` and `rejected` too), and Temporal's spellings.
_STATUSES = {s: s for s in (*STATUSES, "requested", "rejected")} | {"canceled": "cancelled"}

_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false"})


class QueryError(PermanentError, ValueError):
    """A query that does not parse or does not type: ``position`` is the 1-based character."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(f"at {position}: {message}")
        self.position = position
        self.message = message


# -- the tree ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    kind: Literal["string", "number", "bool"]
    value: str | Decimal | bool
    position: int


@dataclass(frozen=True)
class Compare:
    name: str
    op: str
    value: Value
    position: int


@dataclass(frozen=True)
class In:
    name: str
    values: tuple[Value, ...]
    negated: bool
    position: int


@dataclass(frozen=True)
class IsNull:
    name: str
    negated: bool
    position: int


@dataclass(frozen=True)
class Junction:
    op: Literal["AND", "OR"]
    items: tuple["Node", ...]


Node = Compare | In | IsNull | Junction


# -- tokens --------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<op><>|!=|<=|>=|=|<|>)
  | (?P<punct>[(),])
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![A-Za-z0-9_]))
  | (?P<name>[A-Za-z][A-Za-z0-9_]*)
  | (?P<quote>['"])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # op, punct, number, name, keyword, string, end
    text: str
    position: int


def _strings(text: str, start: int, quote: str) -> tuple[str, int]:
    """The quoted string opening at ``start`` (a doubled quote stands for one) and where it ends."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            if i + 1 < len(text) and text[i + 1] == quote:
                out.append(quote)
                i += 2
                continue
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise QueryError(start + 1, f"the string opened here is not closed with {quote}")


def tokens(text: str) -> list[_Token]:
    """``text`` as tokens, ending with an `end` token.

    Raises:
        QueryError: a character that starts no token, or a string left open.
    """
    out: list[_Token] = []
    i = 0
    while i < len(text):
        match = _TOKEN.match(text, i)
        if match is None:
            raise QueryError(i + 1, f"unexpected character {text[i]!r}")
        kind = match.lastgroup or ""
        if kind == "space":
            i = match.end()
            continue
        if kind == "quote":
            value, end = _strings(text, i, match.group())
            if "\x00" in value:
                raise QueryError(i + 1, "a string may not hold the NUL character")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise QueryError(i + 1, "a string must be valid Unicode text") from None
            out.append(_Token("string", value, i + 1))
            i = end
            continue
        word = match.group()
        if kind == "name" and word.lower() in _KEYWORDS:
            kind = "keyword"
            word = word.upper()
        out.append(_Token(kind, word, i + 1))
        i = match.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


# -- the parser ----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        self.at = 0
        self.conditions = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_keyword(self, word: str) -> bool:
        return self.token.kind == "keyword" and self.token.text == word

    def expect(self, kind: str, text: str, what: str) -> _Token:
        token = self.token
        if token.kind != kind or token.text != text:
            raise QueryError(token.position, f"expected {what}, found {_shown(token)}")
        return self.take()

    def query(self) -> Node:
        if self.token.kind == "end":
            raise QueryError(1, "the query is empty")
        node = self.or_expr(0)
        if self.token.kind != "end":
            raise QueryError(self.token.position, f"expected AND, OR or the end, found {_shown(self.token)}")
        return node

    def or_expr(self, depth: int) -> Node:
        items = [self.and_expr(depth)]
        while self.is_keyword("OR"):
            self.take()
            items.append(self.and_expr(depth))
        return items[0] if len(items) == 1 else Junction("OR", tuple(items))

    def and_expr(self, depth: int) -> Node:
        items = [self.term(depth)]
        while self.is_keyword("AND"):
            self.take()
            items.append(self.term(depth))
        return items[0] if len(items) == 1 else Junction("AND", tuple(items))

    def term(self, depth: int) -> Node:
        token = self.token
        if token.kind == "punct" and token.text == "(":
            if depth >= MAX_DEPTH:
                raise QueryError(token.position, f"parentheses nest at most {MAX_DEPTH} deep")
            self.take()
            node = self.or_expr(depth + 1)
            self.expect("punct", ")", "')'")
            return node
        return self.condition()

    def condition(self) -> Node:
        token = self.token
        if token.kind != "name":
            what = "a field name" + (f" ({token.text} is a keyword)" if token.kind == "keyword" else "")
            raise QueryError(token.position, f"expected {what}, found {_shown(token)}")
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise QueryError(token.position, f"a query holds at most {MAX_CONDITIONS} conditions")
        name = self.take().text
        following = self.token
        if following.kind == "op":
            self.take()
            return Compare(
                name, "!=" if following.text == "<>" else following.text, self.value(), token.position
            )
        if self.is_keyword("IS"):
            self.take()
            negated = self.is_keyword("NOT")
            if negated:
                self.take()
            self.expect("keyword", "NULL", "NULL")
            return IsNull(name, negated, token.position)
        negated = self.is_keyword("NOT")
        if negated:
            self.take()
        if self.is_keyword("IN"):
            self.take()
            self.expect("punct", "(", "'(' after IN")
            values = [self.value()]
            while self.token.kind == "punct" and self.token.text == ",":
                self.take()
                values.append(self.value())
                if len(values) > MAX_IN_VALUES:
                    raise QueryError(values[-1].position, f"IN takes at most {MAX_IN_VALUES} values")
            self.expect("punct", ")", "',' or ')'")
            kinds = {v.kind for v in values}
            if len(kinds) > 1:
                raise QueryError(
                    values[0].position, "the values of one IN list must all be strings, numbers or booleans"
                )
            return In(name, tuple(values), negated, token.position)
        if negated:
            raise QueryError(self.token.position, f"expected IN after NOT, found {_shown(self.token)}")
        expected = "an operator (= != < <= > >=), IN, NOT IN or IS [NOT] NULL"
        raise QueryError(following.position, f"expected {expected} after {name}, found {_shown(following)}")

    def value(self) -> Value:
        token = self.token
        if token.kind == "string":
            self.take()
            return Value("string", token.text, token.position)
        if token.kind == "number":
            self.take()
            try:
                number = Decimal(token.text)
            except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
                raise QueryError(token.position, f"{token.text} is not a number") from None
            if len(token.text) > 60 or abs(number.adjusted()) > 300:
                raise QueryError(
                    token.position, "a number has at most 60 characters and an exponent within ±300"
                )
            return Value("number", number, token.position)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            self.take()
            return Value("bool", token.text == "TRUE", token.position)
        raise QueryError(
            token.position, f"expected a value ('text', a number, TRUE or FALSE), found {_shown(token)}"
        )


def _shown(token: _Token) -> str:
    if token.kind == "end":
        return "the end of the query"
    if token.kind == "string":
        return "a string"
    return repr(token.text)


def parse(text: str) -> Node:
    """``text`` as a tree.

    Raises:
        QueryError: it does not follow the grammar (module docstring) or passes a limit.
    """
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(MAX_QUERY_LENGTH + 1, f"a query has at most {MAX_QUERY_LENGTH} characters")
    return _Parser(text).query()


# -- the condition -------------------------------------------------------------------------------


@dataclass
class _Clause:
    """A condition's text (fixed fragments and `{}`) and its parameters, in order."""

    text: str
    args: list[Any]


def _instant(value: Value, what: str) -> datetime:
    if value.kind != "string":
        raise QueryError(
            value.position, f"{what} compares with an instant in quotes ('2026-12-01T00:00:00Z')"
        )
    instant = _parse_instant(str(value.value))
    if instant is None:
        raise QueryError(
            value.position,
            f"{what} compares with an ISO 8601 instant with its offset, not {str(value.value)[:40]!r}",
        )
    return instant


def _parse_instant(text: str) -> datetime | None:
    try:
        instant = datetime.fromisoformat(text)
        # An instant with its offset, that exists in UTC too (year 1 at +05:00 does not).
        return instant.astimezone(UTC) if instant.utcoffset() is not None else None
    except (ValueError, OverflowError):
        return None


def _document(name: str, kind: str, value: Any) -> str:
    return json.dumps({name: {"type": kind, "value": value}}, separators=(",", ":"))


def _built_in_compare(node: Compare) -> _Clause:
    column, kind = _BUILT_IN[node.name]
    op = _SQL_OPERATOR[node.op]
    value = node.value
    if kind == "instant":
        return _Clause(f"{column} {op} {{}}::timestamptz", [_instant(value, node.name)])
    if value.kind != "string":
        raise QueryError(value.position, f"{node.name} compares with a string in quotes")
    if kind == "status":
        if node.op not in ("=", "!="):
            raise QueryError(node.position, "ExecutionStatus compares only with =, !=, IN and NOT IN")
        return _Clause(f"{column} {op} {{}}::text", [_status(value)])
    return _Clause(f"{column} {op} {{}}::text", [value.value])


def _status(value: Value) -> str:
    if value.kind != "string":
        raise QueryError(value.position, "ExecutionStatus compares with a status in quotes ('Running')")
    status = _STATUSES.get(str(value.value).lower())
    if status is None:
        known = ", ".join(sorted({*STATUSES, "requested", "rejected"}))
        raise QueryError(value.position, f"{str(value.value)[:40]!r} is no status; one of {known}")
    return status


def _attribute_equals(name: str, value: Value) -> tuple[_Clause, list[str]]:
    """The condition that the attribute equals ``value``, and the types it looks at."""
    if value.kind == "bool":
        return _Clause(_CONTAINS, [_document(name, "bool", value.value)]), ["bool"]
    if value.kind == "number":
        return _Clause(f"{_NUMBER_OF} = {{}}::numeric", [name, name, value.value]), ["int", "float"]
    text = str(value.value)
    parts = [_CONTAINS, _CONTAINS, _CONTAINS]
    args: list[Any] = [
        _document(name, "keyword", text),
        _document(name, "text", text),
        _document(name, "keyword_list", [text]),
    ]
    types = ["keyword", "text", "keyword_list"]
    instant = _parse_instant(text)
    if instant is not None:
        parts.append(f"{_DATETIME_OF} = {{}}::timestamptz")
        args += [name, name, instant]
        types.append("datetime")
    return _Clause("(" + " OR ".join(parts) + ")", args), types


def _attribute_compare(node: Compare) -> _Clause:
    name, value = node.name, node.value
    if node.op in ("=", "!="):
        equals, types = _attribute_equals(name, value)
        if node.op == "=":
            return equals
        return _Clause(f"({_HAS_TYPED} AND NOT {equals.text})", [name, types, *equals.args])
    op = _SQL_OPERATOR[node.op]
    if value.kind == "bool":
        raise QueryError(node.position, f"{name} {node.op} TRUE/FALSE: a boolean compares only with = and !=")
    if value.kind == "number":
        return _Clause(f"{_NUMBER_OF} {op} {{}}::numeric", [name, name, value.value])
    text = str(value.value)
    clause = _Clause(f"{_STRING_OF} {op} {{}}::text", [name, name, text])
    instant = _parse_instant(text)
    if instant is None:
        return clause
    return _Clause(
        f"({clause.text} OR {_DATETIME_OF} {op} {{}}::timestamptz)", [*clause.args, name, name, instant]
    )


def _in(node: In) -> _Clause:
    if node.name in _BUILT_IN:
        column, kind = _BUILT_IN[node.name]
        if kind == "instant":
            raise QueryError(node.position, f"{node.name} takes =, !=, <, <=, > and >=, not IN")
        values = [_status(v) if kind == "status" else _string_value(v, node.name) for v in node.values]
        op = "<> ALL" if node.negated else "= ANY"
        return _Clause(f"{column} {op}({{}}::text[])", [values])
    parts: list[_Clause] = []
    types: list[str] = []
    for value in node.values:
        equals, value_types = _attribute_equals(node.name, value)
        parts.append(equals)
        types += [t for t in value_types if t not in types]
    text = "(" + " OR ".join(p.text for p in parts) + ")"
    args = [a for p in parts for a in p.args]
    if not node.negated:
        return _Clause(text, args)
    return _Clause(f"({_HAS_TYPED} AND NOT {text})", [node.name, types, *args])


def _string_value(value: Value, name: str) -> str:
    if value.kind != "string":
        raise QueryError(value.position, f"{name} compares with a string in quotes")
    return str(value.value)


def _is_null(node: IsNull) -> _Clause:
    if node.name in _BUILT_IN:
        column, _ = _BUILT_IN[node.name]
        return _Clause(f"{column} IS {'NOT ' if node.negated else ''}NULL", [])
    return _Clause(_HAS if node.negated else f"NOT {_HAS}", [node.name])


def _clause(node: Node) -> _Clause:
    if isinstance(node, Junction):
        parts = [_clause(item) for item in node.items]
        return _Clause(
            "(" + f" {node.op} ".join(p.text for p in parts) + ")", [a for p in parts for a in p.args]
        )
    if isinstance(node, IsNull):
        return _is_null(node)
    if isinstance(node, In):
        return _in(node)
    if node.name in _BUILT_IN:
        return _built_in_compare(node)
    return _attribute_compare(node)


def add_query(filters: Filters, text: str) -> None:
    """AND the condition ``text`` means to ``filters`` (its values as parameters).

    Raises:
        QueryError: it does not parse, or a value does not fit its field (with the position).
    """
    clause = _clause(parse(text))
    filters.add(clause.text, *clause.args)


def condition(text: str) -> tuple[str, list[Any]]:
    """The SQL condition ``text`` means, placeholders from `$1`, and its parameters (for tests and
    the docs: `add_query` is what the list uses)."""
    filters = Filters()
    add_query(filters, text)
    return filters.where(), filters.args
