"""The DLQ service's pure pieces: selections as SQL, stored headers, redrive counts, decoding."""

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow.contracts import DeadLetterFilter
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.core.nul import pg_text
from slotflow_dlq.queries import selection_sql
from slotflow_dlq.store import _decoded_json, _prior_redrives, decode_headers, encode_headers

AT = datetime(2026, 12, 2, tzinfo=UTC)


def test_an_empty_selection_matches_everything_or_the_default_status() -> None:
    assert selection_sql(DeadLetterFilter(), default_status=None) == ("true", [])
    assert selection_sql(DeadLetterFilter(), default_status="parked") == ("status = $1", ["parked"])


def test_every_field_is_a_numbered_bind_parameter() -> None:
    selection = DeadLetterFilter(
        ids=("a", "b"),
        source_service="claimer",
        topic="t",
        reason="r'); DROP TABLE dlq.dead_letters; --",
        job_id="j",
        run_id="x",
        since=AT,
        until=AT,
        status="redriven",
    )
    where, params = selection_sql(selection, default_status="parked", first=3)
    assert where == (
        "id = ANY ($3::text[]) AND status = $4 AND (source_service = $5 OR $5 = ANY (seen_by)) AND topic = $6"
        " AND reason = $7 AND job_id = $8 AND run_id = $9 AND first_seen >= $10 AND first_seen < $11"
    )
    assert params == [
        ["a", "b"],
        "redriven",
        "claimer",
        "t",
        "r'); DROP TABLE dlq.dead_letters; --",
        "j",
        "x",
        AT,
        AT,
    ]
    assert "DROP" not in where  # values never reach the SQL text


def test_nul_in_a_selection_is_made_comparable() -> None:
    _, params = selection_sql(DeadLetterFilter(job_id="a\x00b"), default_status=None)
    assert params == ["a\ufffdb"]
    assert pg_text("\x00") == "\ufffd"


@given(st.lists(st.tuples(st.text(), st.binary())))
def test_stored_headers_round_trip_byte_exact(headers: list[tuple[str, bytes]]) -> None:
    stored = encode_headers(headers)
    assert "\\u0000" not in stored  # jsonb would refuse it
    assert decode_headers(stored) == [
        (name.encode().decode(errors="replace"), value) for name, value in headers
    ]


@pytest.mark.parametrize(("value", "count"), [(None, 0), (b"3", 3), (b"-2", 0), (b"x", 0), (b"\xff", 0)])
def test_the_redrive_count_a_record_arrived_with(value: bytes | None, count: int) -> None:
    headers = [] if value is None else [("other", b"1"), (REDRIVE_COUNT_HEADER, value)]
    assert _prior_redrives(headers) == count


def test_only_json_postgres_can_hold_is_decoded() -> None:
    assert json.loads(_decoded_json(b'{"type": "job.due", "data": {}}') or "") == {
        "type": "job.due",
        "data": {},
    }
    assert _decoded_json(b"{truncated") is None
    assert _decoded_json(b'{"a": "nul \\u0000 inside"}') is None
    assert _decoded_json(b"[" * 50_000 + b"]" * 50_000) is None
    assert _decoded_json(b"") is None
