"""NUL-finding for errors a person can act on, and data errors sorted as permanent everywhere."""

import asyncpg
import pytest

from slotflow.core.nul import find_nul, scrub_nul
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
