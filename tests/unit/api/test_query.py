"""The workflow list's filter language: the parser, its errors, and the SQL condition it builds.

The safety property is checked the way an attacker would try it: whatever the query holds, the
condition's text is made only of the fixed templates, `$n` placeholders, AND/OR/NOT and
parentheses, and every name and value the query held is a parameter.
"""

import json
import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotflow_api import query as q
from slotflow_api.query import QueryError, condition, parse

# -- parsing -------------------------------------------------------------------------------------


def test_precedence_and_binds_tighter_than_or() -> None:
    tree = parse("A = 1 OR B = 2 AND C = 3")
    assert isinstance(tree, q.Junction)
    assert tree.op == "OR"
    assert isinstance(tree.items[1], q.Junction)
    assert tree.items[1].op == "AND"
    grouped = parse("(A = 1 OR B = 2) AND C = 3")
    assert isinstance(grouped, q.Junction)
    assert grouped.op == "AND"


def test_keywords_in_any_case_names_as_written() -> None:
    tree = parse("stage in ('a') and Flag = true or X is not null")
    assert isinstance(tree, q.Junction)
    assert tree.op == "OR"
    first = tree.items[0]
    assert isinstance(first, q.Junction)
    assert first.items[0] == q.In("stage", (q.Value("string", "a", 11),), False, 1)
    assert tree.items[1] == q.IsNull("X", True, 35)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("'O''Brien'", "O'Brien"),
        ('"double ""quoted"""', 'double "quoted"'),
        ("''", ""),
        ("'a -- b /* c */'", "a -- b /* c */"),
    ],
)
def test_strings(text: str, value: str) -> None:
    node = parse(f"Name = {text}")
    assert isinstance(node, q.Compare)
    assert node.value.value == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", Decimal(0)), ("-12", Decimal(-12)), ("2.5", Decimal("2.5")), ("1e3", Decimal(1000))],
)
def test_numbers(text: str, value: Decimal) -> None:
    node = parse(f"N >= {text}")
    assert isinstance(node, q.Compare)
    assert node.value == q.Value("number", value, 6)


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("", 1, "the query is empty"),
        ("   ", 1, "the query is empty"),
        ("Customer", 9, "expected an operator"),
        ("Customer =", 11, "expected a value"),
        ("Customer = acme", 12, "expected a value"),
        ("Customer = 'acme", 12, "not closed"),
        ("Customer == 'a'", 11, "expected a value"),
        ("Customer = 'a' AND", 19, "expected a field name"),
        ("Customer = 'a' Stage = 'b'", 16, "expected AND, OR or the end"),
        ("(Customer = 'a'", 16, "expected ')'"),
        ("Customer = 'a')", 15, "expected AND, OR or the end"),
        ("Customer IN 'a'", 13, "'(' after IN"),
        ("Customer IN ()", 14, "expected a value"),
        ("Customer IN ('a' 'b')", 18, "',' or ')'"),
        ("Customer NOT = 'a'", 14, "expected IN"),
        ("Customer IS 'a'", 13, "expected NULL"),
        ("Customer ~ 'a'", 10, "unexpected character '~'"),
        ("Customer = 'a'; DROP TABLE x", 15, "unexpected character ';'"),
        ("Customer = 'a' -- comment", 16, "unexpected character '-'"),
        ("OR = 1", 1, "OR is a keyword"),
        ("1 = 1", 1, "expected a field name"),
        ("A IN (1, 'x')", 7, "all be strings, numbers or booleans"),
        ("A = 'nul\x00'", 5, "NUL"),
        ("A = 1e999", 5, "exponent"),
    ],
)
def test_syntax_errors_say_where_and_what(text: str, position: int, message: str) -> None:
    with pytest.raises(QueryError) as caught:
        parse(text)
    assert caught.value.position == position
    assert message in caught.value.message
    assert str(caught.value).startswith(f"at {position}: ")


def test_limits() -> None:
    with pytest.raises(QueryError, match="at most 2000 characters"):
        parse("A = '" + "x" * 2_000 + "'")
    with pytest.raises(QueryError, match="at most 64 conditions"):
        parse(" OR ".join(f"A{i} = 1" for i in range(65)))
    with pytest.raises(QueryError, match="nest at most 16"):
        parse("(" * 17 + "A = 1" + ")" * 17)
    parse("(" * 16 + "A = 1" + ")" * 16)
    with pytest.raises(QueryError, match="at most 100 values"):
        parse("A IN (" + ", ".join(str(i) for i in range(101)) + ")")


# -- typing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("WorkflowId = 5", 14, "a string in quotes"),
        ("WorkflowType = TRUE", 16, "a string in quotes"),
        ("ExecutionStatus = 'Sleeping'", 19, "'Sleeping' is no status"),
        ("ExecutionStatus > 'Running'", 1, "only with =, !=, IN and NOT IN"),
        ("ExecutionStatus IN ('Running', 'Nope')", 32, "is no status"),
        ("StartTime > 'yesterday'", 13, "ISO 8601 instant with its offset"),
        ("StartTime > '2026-12-01T00:00:00'", 13, "with its offset"),
        ("StartTime > 3", 13, "an instant in quotes"),
        ("StartTime > '0001-01-01T00:00:00+05:00'", 13, "with its offset"),
        ("CloseTime IN ('2026-12-01T00:00:00Z')", 1, "not IN"),
        ("Vip < TRUE", 1, "compares only with = and !="),
    ],
)
def test_type_errors_say_where_and_what(text: str, position: int, message: str) -> None:
    with pytest.raises(QueryError) as caught:
        condition(text)
    assert caught.value.position == position
    assert message in caught.value.message


def test_statuses_in_either_spelling() -> None:
    assert condition("ExecutionStatus = 'Running'") == ("w.status = $1::text", ["running"])
    assert condition("ExecutionStatus IN ('Canceled', 'terminated')") == (
        "w.status = ANY($1::text[])",
        [["cancelled", "terminated"]],
    )
    assert condition("ExecutionStatus NOT IN ('Completed')") == (
        "w.status <> ALL($1::text[])",
        [["completed"]],
    )


def test_built_in_fields() -> None:
    assert condition("WorkflowId = 'order-1'") == ("w.workflow_id = $1::text", ["order-1"])
    assert condition("WorkflowType != 'x'") == ("w.workflow_type <> $1::text", ["x"])
    at = datetime(2026, 12, 1, tzinfo=UTC)
    assert condition("StartTime >= '2026-12-01T00:00:00Z'") == (
        "COALESCE(w.started_at, w.requested_at) >= $1::timestamptz",
        [at],
    )
    assert condition("CloseTime IS NULL") == ("w.ended_at IS NULL", [])


def test_a_string_equality_is_one_containment_per_type() -> None:
    text, args = condition("Customer = 'acme'")
    assert text == (
        "(w.search_attributes @> $1::jsonb OR w.search_attributes @> $2::jsonb OR w.search_attributes @> $3::jsonb)"
    )
    assert [json.loads(a) for a in args] == [
        {"Customer": {"type": "keyword", "value": "acme"}},
        {"Customer": {"type": "text", "value": "acme"}},
        {"Customer": {"type": "keyword_list", "value": ["acme"]}},
    ]


def test_an_instant_string_also_compares_with_datetime_attributes() -> None:
    text, args = condition("Due < '2026-12-24T18:00:00+01:00'")
    assert "::timestamptz" in text
    assert "IN ('keyword', 'text')" in text
    assert args[-1] == datetime.fromisoformat("2026-12-24T18:00:00+01:00")


def test_a_number_compares_typed_never_cast_from_a_keyword() -> None:
    text, args = condition("Amount > 100")
    assert text == (
        "(CASE WHEN w.search_attributes -> $1::text ->> 'type' IN ('int', 'float') "
        "THEN (w.search_attributes -> $2::text ->> 'value')::numeric END) > $3::numeric"
    )
    assert args == ["Amount", "Amount", Decimal(100)]


def test_not_equal_needs_the_attribute_set_with_a_comparable_type() -> None:
    text, args = condition("Vip != TRUE")
    assert text.startswith(
        "(COALESCE(w.search_attributes -> $1::text ->> 'type' = ANY($2::text[]), false) AND NOT "
    )
    assert args[:2] == ["Vip", ["bool"]]
    text, args = condition("Stage NOT IN ('a', 'b')")
    assert args[1] == ["keyword", "text", "keyword_list"]


def test_is_null_on_an_attribute() -> None:
    assert condition("Coupon IS NULL") == ("NOT COALESCE(w.search_attributes ? $1::text, false)", ["Coupon"])
    assert condition("Coupon IS NOT NULL") == ("COALESCE(w.search_attributes ? $1::text, false)", ["Coupon"])


# -- safety --------------------------------------------------------------------------------------

#: Every piece a condition's text may be made of: the module's templates split at their
#: placeholders, the built-in columns, the operators, the junctions.
_TEMPLATE_PIECES = sorted(
    {
        piece
        for template in (q._NUMBER_OF, q._STRING_OF, q._DATETIME_OF, q._CONTAINS, q._HAS_TYPED, q._HAS)
        for piece in template.split("{}")
        if piece
    }
    | {column for column, _ in q._BUILT_IN.values()},
    key=len,
    reverse=True,
)
_GLUE = re.compile(
    r"\$\d+|::(?:text\[\]|text|numeric|timestamptz|jsonb)|\s+|[()]|AND|OR|NOT|IS|NULL|= ANY|<> ALL|<>|<=|>=|=|<|>"
)


def _only_fixed_text(sql: str) -> bool:
    rest = sql
    for piece in _TEMPLATE_PIECES:
        rest = rest.replace(piece, " ")
    return _GLUE.sub("", rest) == ""


INJECTIONS = [
    "'; DROP TABLE workflows; --",
    "' OR '1'='1",
    "x') OR true OR ('",
    "$1",
    "{schema}.workflows",
    "\\'; SELECT pg_sleep(10); --",
    "Robert'); DROP TABLE Students;--",
    "}}{{",
    "{}",
    "' UNION SELECT * FROM api.tokens --",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_attempts_travel_as_parameters(payload: str) -> None:
    quoted = "'" + payload.replace("'", "''") + "'"
    for text in (
        f"Customer = {quoted}",
        f"Customer > {quoted}",
        f"WorkflowId IN ({quoted}, 'b')",
        f"Customer NOT IN ({quoted})",
        f"WorkflowType != {quoted}",
    ):
        sql, args = condition(text)
        assert _only_fixed_text(sql), sql
        if not re.fullmatch(r"\$\d+", payload):  # `$1` is in every condition, as a placeholder
            assert payload not in sql
        assert any(payload in json.dumps(a, default=str) or a == payload for a in args)


def test_injection_outside_a_string_does_not_parse() -> None:
    for text in (
        "Customer = 'a' OR 1=1",
        "Customer = 'a'; DROP TABLE x",
        "Customer = 'a' /* */",
        "A = 'a' UNION",
    ):
        with pytest.raises(QueryError):
            condition(text)


_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: n.lower() not in {"and", "or", "not", "in", "is", "null", "true", "false"}
)
_strings = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
_literals = st.one_of(
    _strings.map(lambda s: "'" + s.replace("'", "''") + "'"),
    st.integers(-(10**12), 10**12).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**6), max_value=10**6).map(
        str
    ),
    st.sampled_from(["TRUE", "false"]),
)
_ops = st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">="])


@st.composite
def _conditions(draw: st.DrawFn) -> str:
    name = draw(_names)
    form = draw(st.integers(0, 2))
    if form == 0:
        return f"{name} {draw(_ops)} {draw(_literals)}"
    if form == 1:
        kind = draw(st.sampled_from([0, 1]))
        values = draw(
            st.lists(_literals.filter(lambda v: v.startswith("'") == (kind == 0)), min_size=1, max_size=3)
        )
        return f"{name} {'NOT ' if draw(st.booleans()) else ''}IN ({', '.join(values)})"
    return f"{name} IS {'NOT ' if draw(st.booleans()) else ''}NULL"


_queries = st.recursive(
    _conditions(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from([" AND ", " OR ", " and ", " or "]), inner).map("".join),
        inner.map(lambda x: f"({x})"),
    ),
    max_leaves=8,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_queries)
def test_any_well_formed_query_builds_sql_of_fixed_text_only(text: str) -> None:
    try:
        sql, args = condition(text)
    except QueryError:
        return  # a type error (a boolean with <, a status that is none): said, not built
    assert _only_fixed_text(sql), sql
    assert sql.count("$") == len(args)
    assert set(re.findall(r"\$(\d+)", sql)) == {str(i) for i in range(1, len(args) + 1)}


@settings(max_examples=500)
@given(st.text(max_size=200))
def test_any_text_parses_or_raises_a_query_error(text: str) -> None:
    try:
        sql, _args = condition(text)
    except QueryError as err:
        position = err.position
        assert 1 <= position <= len(text) + 1
        return
    assert _only_fixed_text(sql), sql
