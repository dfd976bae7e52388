"""slotflow.core.cursors: the keyset cursor every list hands out."""

from datetime import UTC, datetime

import pytest

from slotflow.core.cursors import InvalidCursor, decode_cursor, encode_cursor
from slotflow.errors import PermanentError


def test_a_cursor_carries_its_sort_key_back() -> None:
    at = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    cursor = encode_cursor([at, "dl-7", 3])
    assert "=" not in cursor
    assert decode_cursor(cursor, (datetime, str, int)) == [at, "dl-7", 3]
    # Cursors handed out padded (the DLQ's, before) still read.
    assert decode_cursor(cursor + "=" * (-len(cursor) % 4), (datetime, str, int)) == [at, "dl-7", 3]


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        "W10",  # [] : valid base64 JSON, wrong shape
        encode_cursor(["2026-03-29T01:30:00", "x"]),  # no offset
        encode_cursor([1, "x"]),
        encode_cursor(["2026-03-29T01:30:00+00:00", True]),
    ],
)
def test_cursors_this_service_did_not_make_are_refused(cursor: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor, (datetime, str))
    assert issubclass(InvalidCursor, PermanentError)
