"""The stats histogram: quantiles within its stated relative error, exact merges."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow_base.stats import histogram

values = st.lists(st.floats(min_value=1e-4, max_value=1e5, allow_nan=False), min_size=1, max_size=300)


def _nearest_rank(data: list[float], q: float) -> float:
    ordered = sorted(data)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _build(data: list[float]) -> histogram.Histogram:
    h: histogram.Histogram = {}
    for v in data:
        h = histogram.add(h, v)
    return h


@given(values, st.sampled_from([0.5, 0.95, 0.99, 1.0]))
def test_quantile_is_within_the_relative_error(data: list[float], q: float) -> None:
    exact = _nearest_rank(data, q)
    measured = histogram.quantile(_build(data), q)
    assert measured is not None
    assert abs(measured - exact) <= exact * histogram.RELATIVE_ERROR * (1 + 1e-9)


@given(values, values)
def test_merge_equals_one_histogram_of_both(a: list[float], b: list[float]) -> None:
    assert histogram.merge([_build(a), _build(b)]) == _build(a + b)
    assert histogram.count(histogram.merge([_build(a), _build(b)])) == len(a) + len(b)


def test_zero_and_negative_values_count_as_zero() -> None:
    h = _build([0.0, -3.0, 1e-9])
    assert h == {histogram.ZERO_BUCKET: 3}
    assert histogram.quantile(h, 0.99) == 0.0
    mixed = _build([0.0, 2.0])
    assert histogram.quantile(mixed, 0.5) == 0.0
    assert histogram.quantile(mixed, 1.0) == pytest.approx(2.0, rel=histogram.RELATIVE_ERROR)


def test_empty_and_bad_quantiles() -> None:
    assert histogram.quantile({}, 0.5) is None
    with pytest.raises(ValueError, match="quantile"):
        histogram.quantile({"1": 1}, 0)
