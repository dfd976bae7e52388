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


# --- the whole grammar --------------------------------------------------------------------------

_FIELD_BOUNDS = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
_NAMED = {
    "month": ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    "day-of-week": ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}


@st.composite
def _value(draw: st.DrawFn, field: str) -> str:
    low, high = _FIELD_BOUNDS[field]
    number = draw(st.integers(low, high))
    names = _NAMED.get(field)
    if names and number - (1 if field == "month" else 0) < len(names) and draw(st.booleans()):
        name = names[number - 1] if field == "month" else names[number % 7]
        return draw(st.sampled_from([name, name.upper(), name.capitalize()]))
    return str(number)


@st.composite
def _item(draw: st.DrawFn, field: str, extensions: bool, hashed: bool) -> str:
    low, high = _FIELD_BOUNDS[field]
    step = st.integers(1, max(2, (high - low) // 2))
    kinds = ["value", "range", "star_step", "range_step", "start_step"]
    if hashed:
        kinds.append("hash")
    if extensions and field == "day-of-month":
        kinds += ["last", "nearest", "to_last"]
    if extensions and field == "day-of-week":
        kinds += ["nth", "last_of"]
    kind = draw(st.sampled_from(kinds))
    if kind == "value":
        return draw(_value(field))
    if kind == "range":
        return f"{draw(_value(field))}-{draw(_value(field))}"
    if kind == "star_step":
        return f"*/{draw(step)}"
    if kind == "range_step":
        return f"{draw(_value(field))}-{draw(_value(field))}/{draw(step)}"
    if kind == "start_step":
        return f"{draw(_value(field))}/{draw(step)}"
    if kind == "hash":
        letter = draw(st.sampled_from(["H", "R", "h"]))
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        span = draw(st.sampled_from(["", f"({a}-{b})"]))
        every = draw(st.sampled_from(["", f"/{draw(step)}"]))
        return f"{letter}{span}{every}"
    if kind == "last":
        return draw(st.sampled_from(["L", "LW", "l"]))
    if kind == "nearest":
        day = draw(st.integers(1, 31))
        return draw(st.sampled_from([f"{day}W", f"W{day}"]))
    if kind == "to_last":
        return f"{draw(st.integers(1, 31))}-L"
    if kind == "nth":
        return f"{draw(_value(field))}#{draw(st.integers(1, 5))}"
    weekday = draw(st.integers(0, 7))
    return draw(st.sampled_from([f"{weekday}L", f"L{weekday}"]))


@st.composite
def _field(draw: st.DrawFn, field: str, extensions: bool, hashed: bool) -> str:
    if draw(st.integers(0, 3)) == 0:
        return "?" if field in ("day-of-month", "day-of-week") and draw(st.booleans()) else "*"
    items = draw(st.lists(_item(field, extensions, hashed), min_size=1, max_size=3))
    if draw(st.integers(0, 7)) == 0:
        items.insert(draw(st.integers(0, len(items))), "*")
    return ",".join(items)


@st.composite
def cron_expressions(draw: st.DrawFn, *, extensions: bool = True, hashed: bool = False) -> str:
    """Any expression of the grammar (and some it refuses: the caller filters on validity).

    Time-of-day fields stay dense enough that a few slots come within days, so a test sees some.
    """
    six = draw(st.booleans())
    fields = ["minute", "hour", "day-of-month", "month", "day-of-week"]
    if six:
        fields.insert(0, "second")
    parts = [draw(_field(name, extensions, hashed)) for name in fields]
    return " ".join(parts)
