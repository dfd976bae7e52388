"""The rows the outbox stores: a caller-encoded event equals the one `append_many` would store."""

from datetime import UTC, datetime

from slotflow.contracts import CommandAccepted, wrap
from slotflow.contracts.codec import encode
from slotflow.pg.outbox import Encoded, Staged, encoded, headers_json


def test_an_encoded_row_equals_the_staged_envelope_row() -> None:
    envelope = wrap(
        CommandAccepted(command_id="c", command_type="t", subject="s"),
        id="c/accepted",
        key="s",
        source="test",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    extra = {"traceparent": b"00-abc-def-01"}
    by_hand = Encoded(
        "topic", "c/accepted", "s", encode(envelope), headers_json("command.accepted", 1, extra)
    )
    assert encoded(Staged("topic", envelope, extra)) == by_hand
    assert encoded(Staged("topic", envelope)).headers == headers_json("command.accepted", 1)
