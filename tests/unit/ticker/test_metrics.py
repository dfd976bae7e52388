"""The lateness histogram that takes counted observations exposes what prometheus_client's own
Histogram would after the same observations one by one."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from slotflow_ticker.metrics import LATENCY_BUCKETS, CountedHistogram

amounts = st.one_of(st.sampled_from(LATENCY_BUCKETS), st.floats(min_value=0, max_value=120, allow_nan=False))


@given(st.lists(st.tuples(amounts, st.integers(min_value=1, max_value=50)), max_size=30))
def test_counted_observations_expose_like_a_histogram(observations: list[tuple[float, int]]) -> None:
    reference_registry, counted_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("late_seconds", "doc", buckets=LATENCY_BUCKETS, registry=reference_registry)
    counted = CountedHistogram("late_seconds", "doc", buckets=LATENCY_BUCKETS, registry=counted_registry)
    for amount, count in observations:
        counted.observe(amount, count)
        for _ in range(count):
            reference.observe(amount)
    expected = _samples(reference_registry)
    got = _samples(counted_registry)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert abs(got[name] - value) <= 1e-9 * max(1.0, abs(value)), name


def test_buckets_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        CountedHistogram("x", "doc", buckets=(1.0, 0.5), registry=CollectorRegistry())


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("#") or "_created" in line:
            continue
        name, value = line.rsplit(" ", 1)
        found[name] = float(value)
    return found
