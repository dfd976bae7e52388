"""Run timings in milliseconds are exact to the microsecond, with no float noise."""

from datetime import timedelta

from slotflow_api.read_model import _millis


def test_milliseconds_carry_no_float_noise() -> None:
    # total_seconds() * 1000 gives 390.34200000000004 here.
    assert timedelta(microseconds=390342).total_seconds() * 1000 != 390.342
    assert _millis(timedelta(microseconds=390342)) == 390.342
    assert _millis(timedelta(seconds=-1, microseconds=999_999)) == -0.001
