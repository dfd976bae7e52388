"""Hypothesis strategies for cron expressions whose allowed values the test knows, and the
documented matcher (tests/cron_oracle.py), so slot tests do not check slotflow against itself."""

from datetime import datetime

from hypothesis import strategies as st

from tests.cron_oracle import CronOracle


def _listed(
    low: int, high: int, step_max: int, field_high: int | None = None
) -> st.SearchStrategy[tuple[str, set[int] | None]]:
    """Star, a list of values in [low, high], or "*/k" (which steps over the whole field)."""
    values = st.lists(st.integers(low, high), min_size=1, max_size=4)
    listed = values.map(lambda vs: (",".join(str(v) for v in sorted(set(vs))), set(vs)))
    top = high if field_high is None else field_high
    stepped = st.integers(2, step_max).map(lambda k: (f"*/{k}", set(range(low, top + 1, k))))
    return st.one_of(st.just(("*", None)), listed, stepped)


@st.composite
def cron_fields(draw: st.DrawFn, *, seconds: bool | None = None) -> tuple[str, list[set[int] | None]]:
    """A cron expression and, per field (second, minute, hour, dom, month, dow), the allowed values."""
    six = draw(st.booleans()) if seconds is None else seconds
    second = draw(_listed(0, 59, 30)) if six else ("0", {0})
    minute = draw(_listed(0, 59, 30))
    hour = draw(_listed(0, 23, 12))
    dom = draw(st.one_of(st.just(("*", None)), _listed(1, 28, 10, field_high=31)))
    month = draw(st.one_of(st.just(("*", None)), _listed(1, 12, 6)))
    dow = draw(st.one_of(st.just(("*", None)), _listed(0, 6, 3)))
    parts = [minute[0], hour[0], dom[0], month[0], dow[0]]
    if six:
        parts.insert(0, second[0])
    return " ".join(parts), [second[1], minute[1], hour[1], dom[1], month[1], dow[1]]


def matches_fields(wall: datetime, expression: str) -> bool:
    """Whether the expression matches a wall time, by the documented rules (tests/cron_oracle.py,
    which shares no code with slotflow)."""
    return CronOracle(expression).matches(wall)
