"""slotflow.core.nul (finding NUL, and text PostgreSQL can hold); data errors sorted as permanent."""

import json

import asyncpg
import pytest

from slotflow.core.nul import find_nul, jsonb_text, pg_text, scrub_nul, storable
from slotflow.core.retry import is_data_error, is_retryable


def test_find_nul_names_the_first_string_holding_one() -> None:
    assert find_nul({"a": "fine", "b": ["x", {"c": "y\x00"}]}) == "b.1.c"
    assert find_nul({"k\x00": 1}) == "k\\x00"
    assert find_nul("\x00") == ""
    assert find_nul({"a": [1, 2.5, None, True, "no nul"]}) is None


def test_scrub_nul_replaces_every_one() -> None:
    assert scrub_nul({"k\x00": ["a\x00b", ("\x00",)], "n": 3}) == {
        "k\ufffd": ["a\ufffdb", ["\ufffd"]],
        "n": 3,
    }


def test_nul_becomes_the_replacement_character_everywhere_in_a_json_value() -> None:
    value = {"k\x00": ["a\x00b", {"n": "\x00"}], "ok": 1}
    text = jsonb_text(value)
    assert "\\u0000" not in text
    assert json.loads(text) == {"k\ufffd": ["a\ufffdb", {"n": "\ufffd"}], "ok": 1}
    assert jsonb_text({"plain": "text"}) == json.dumps({"plain": "text"})
    # A literal backslash-u-zero text is not a NUL and is kept as it is.
    assert json.loads(jsonb_text({"s": "\\u0000"})) == {"s": "\\u0000"}


def test_text_columns_get_no_nul_and_no_lone_surrogate() -> None:
    assert pg_text("a\x00b") == "a\ufffdb"
    assert storable("ok") == "ok"
    assert storable("x\ud800y\x00") == "x?y\ufffd"


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.UntranslatableCharacterError("unsupported Unicode escape sequence"),
        asyncpg.CharacterNotInRepertoireError('invalid byte sequence for encoding "UTF8": 0x00'),
        asyncpg.NumericValueOutOfRangeError("integer out of range"),
        asyncpg.ProgramLimitExceededError("index row size exceeds maximum"),
        RecursionError("maximum recursion depth exceeded"),
    ],
    ids=["nul-jsonb", "nul-text", "out-of-range", "program-limit", "recursion"],
)
def test_errors_about_the_data_are_permanent(error: BaseException) -> None:
    assert not is_retryable(error)


def test_outages_and_rollbacks_stay_transient() -> None:
    assert is_retryable(asyncpg.SerializationError("could not serialize access"))
    assert is_retryable(asyncpg.DeadlockDetectedError("deadlock detected"))
    assert is_retryable(ConnectionResetError())
    assert not is_data_error(asyncpg.SerializationError("x"))
