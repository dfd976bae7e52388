"""The database clock estimate the timing wheel runs on (pure: no database, a fake monotonic clock)."""

from datetime import UTC, datetime, timedelta

import pytest

from slotflow.errors import TransientStorageError
from slotflow_ticker import ticking
from slotflow_ticker.ticking import DatabaseClock

DB_NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class FakeMonotonic:
    def __init__(self, start: float) -> None:
        self.value = start

    def __call__(self) -> float:
        return self.value


def test_the_estimate_is_the_last_database_reading_plus_monotonic_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A monotonic clock with a strange epoch (libfaketime moves it too) changes nothing.
    mono = FakeMonotonic(1_796_215_059.0)
    monkeypatch.setattr(ticking.time, "monotonic", mono)  # type: ignore[attr-defined]
    clock = DatabaseClock()
    clock.anchor(DB_NOW)
    mono.value += 1.25
    assert clock.now() == DB_NOW + timedelta(seconds=1.25)
    assert clock.seconds_until(DB_NOW + timedelta(seconds=2)) == pytest.approx(0.75)
    clock.anchor(DB_NOW + timedelta(seconds=1))  # re-anchored by the next query
    assert clock.now() == DB_NOW + timedelta(seconds=1)


def test_there_is_no_estimate_before_the_database_was_read() -> None:
    with pytest.raises(TransientStorageError):
        DatabaseClock().now()
