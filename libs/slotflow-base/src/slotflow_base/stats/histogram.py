"""A mergeable log-bucketed histogram for durations and lateness (seconds).

A value v > 0 falls in bucket i = ceil(log(v) / log(GAMMA)), which covers (GAMMA**(i-1), GAMMA**i].
Quantiles are read back as the bucket's midpoint 2 * GAMMA**i / (GAMMA + 1), within a relative
error of (GAMMA - 1) / (GAMMA + 1) (about 1 % for GAMMA = 1.02) of the exact nearest-rank value.
Because a histogram is only counts per bucket, two of them merge by adding counts: the per-handler
and multi-window percentiles the api serves are exact merges of the per-schedule windows, not
averages of percentiles.

The form is JSON-ready (faust's changelog and PostgreSQL's jsonb both store it): bucket index as a
string to its count, with ZERO_BUCKET for values at or below MIN_VALUE.
"""

import math
from collections.abc import Iterable, Mapping

GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)
#: Values at or below this (a microsecond) are counted as zero: clocks do not resolve less.
MIN_VALUE = 1e-6
ZERO_BUCKET = "z"
#: Worst relative error of a quantile read back from a bucket.
RELATIVE_ERROR = (GAMMA - 1) / (GAMMA + 1)

Histogram = dict[str, int]


def bucket_of(value: float) -> str:
    """The bucket ``value`` (seconds, negative clamps to zero) is counted in."""
    if value <= MIN_VALUE:
        return ZERO_BUCKET
    return str(math.ceil(math.log(value) / _LOG_GAMMA))


def add(histogram: Mapping[str, int], value: float) -> Histogram:
    """A copy of ``histogram`` with ``value`` counted once more."""
    out = dict(histogram)
    key = bucket_of(value)
    out[key] = out.get(key, 0) + 1
    return out


def merge(histograms: Iterable[Mapping[str, int]]) -> Histogram:
    """The sum of ``histograms`` (exact: counts per bucket add)."""
    out: Histogram = {}
    for histogram in histograms:
        for key, count in histogram.items():
            out[key] = out.get(key, 0) + int(count)
    return out


def count(histogram: Mapping[str, int]) -> int:
    return sum(int(n) for n in histogram.values())


def _value_of(key: str) -> float:
    if key == ZERO_BUCKET:
        return 0.0
    index = int(key)
    return 2 * GAMMA**index / (GAMMA + 1)


def _order(key: str) -> float:
    return -math.inf if key == ZERO_BUCKET else int(key)


def quantile(histogram: Mapping[str, int], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0 < q <= 1), or None for an empty histogram."""
    if not 0 < q <= 1:
        raise ValueError(f"quantile must be in (0, 1], got {q}")
    total = count(histogram)
    if total == 0:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for key in sorted(histogram, key=_order):
        seen += int(histogram[key])
        if seen >= rank:
            return _value_of(key)
    return _value_of(max(histogram, key=_order))  # unreachable with consistent counts
