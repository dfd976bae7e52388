"""Cron expressions: slotflow's own grammar, and the search for the next matching naive wall time.

One module reads an expression and answers "which wall time matches next", so the validator of a
`CronSpec` and the slot computation can never disagree about what an expression means. The rules
are written out, with examples, in docs/scheduling.md ("Cron expressions"); in short:

- 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first).
- A field is a comma list of terms: `*` (`?` in a day field), a value, a range `a-b` (wrapping when
  `a > b`: `22-2` is 22, 23, 0, 1, 2), a step `*/k`, `a-b/k` or `a/k` (from `a` to the field's end),
  names (`jan`, `mon`). `a-a` is the one value `a`. A `*` anywhere in a list allows every value.
- Day-of-month also takes `L` (last day), `LW` (last weekday), `15W` (weekday nearest the 15th),
  `a-L`; day-of-week takes `1#2` (second Monday), `5L` or `L5` (last Friday). 0 and 7 are Sunday.
- Day-of-month and day-of-week: when neither field starts with `*` or `?`, a day matching either
  fires; otherwise a day must match both (Vixie cron's rule). `L`, `W` and `#` follow it too.
- `H` picks a value from the schedule id (`H`, `H/15`, `H(0-29)`, `H(0-29)/10`), the same in every
  process; `R` (croniter's random value) is read as `H`. Both need the schedule id.

Matching is on integers: every field becomes a sorted tuple of allowed values, and the days of a
month are computed once per (year, month) and kept, so the search is a few bisections per step.
"""

import calendar
import functools
import hashlib
import re
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from slotflow.errors import CronNeedsScheduleId, InvalidCronExpression

#: An expression with no match within this many years has no next slot (croniter's and cronsim's
#: horizon too): `0 0 30 2 *` never fires.
MAX_YEARS_BETWEEN_MATCHES = 50
_LAST_YEAR = 9999
_SECOND = timedelta(seconds=1)

FieldName = Literal["second", "minute", "hour", "day-of-month", "month", "day-of-week"]
FIELDS: tuple[FieldName, ...] = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
#: The values a field may name. Day-of-week takes 7 as a second spelling of Sunday.
_BOUNDS: dict[FieldName, tuple[int, int]] = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
#: Where `*`, `*/k` and `a/k` end, and where a wrapping range turns: Saturday in day-of-week (7 is
#: only another spelling of Sunday, so the week is counted once).
_TOP: dict[FieldName, int] = {**{name: high for name, (_, high) in _BOUNDS.items()}, "day-of-week": 6}
#: What a bare `H` draws from: day-of-month stops at 28, so a monthly `H` fires in every month.
_HASH_SPAN: dict[FieldName, tuple[int, int]] = {
    **{name: (low, _TOP[name]) for name, (low, _) in _BOUNDS.items()},
    "day-of-month": (1, 28),
}
_NAMES: dict[FieldName, dict[str, int]] = {
    "month": {
        name: number
        for number, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
        )
    },
    "day-of-week": {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6},
}

_VALUE = r"(\d+|[a-z]{3})"
_STAR = re.compile(r"\*(?:/(\d+))?")
_SPAN = re.compile(rf"{_VALUE}(?:-{_VALUE})?(?:/(\d+))?")
_TO_LAST = re.compile(rf"{_VALUE}-l(?:/(\d+))?")
_NEAREST = re.compile(r"(\d+)w|w(\d+)")
_NTH = re.compile(rf"{_VALUE}(?:-{_VALUE})?#(\d+)")
_LAST_OF = re.compile(r"(\d+)l|l(\d+)")
_HASHED = re.compile(r"([hr])(?:\((\d+)-(\d+)\))?(?:/(\d+))?")


# --- syntax -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Span:
    """Values `first`..`last` every `step`; wrapping past the field's top when first > last."""

    first: int
    last: int
    step: int = 1


@dataclass(frozen=True, slots=True)
class _Hashed:
    """`H(low-high)/step`: a value (or a phase, with a step) fixed by the schedule id."""

    low: int
    high: int
    step: int | None
    random: bool


@dataclass(frozen=True, slots=True)
class _Special:
    """A day form matched per month: `L`, `LW`, `15W` (day), `1#2` (nth), `5L` (last_of)."""

    kind: Literal["last_day", "last_weekday", "nearest", "nth", "last_of"]
    value: int = 0
    nth: int = 0


_Term = _Span | _Hashed | _Special


class _FieldSyntax:
    """One field's terms, and whether it counts as restricted for the day rule."""

    __slots__ = ("any", "name", "restricted", "terms")

    def __init__(self, name: FieldName, text: str) -> None:
        self.name = name
        self.terms: list[_Term] = []
        #: Vixie cron's rule: a day field that starts with `*` or `?` does not restrict the day, so
        #: the other day field alone decides (`*/2` included: it reads as "every other day").
        self.restricted = not text.startswith(("*", "?"))
        self.any = False
        if text == "?":
            if name not in ("day-of-month", "day-of-week"):
                raise _invalid(name, text, "`?` is only for day-of-month and day-of-week")
            self.any = True
            return
        for item in text.split(","):
            if not item:
                raise _invalid(name, text, "an empty item in the list")
            self._term(item)

    def _term(self, item: str) -> None:
        name = self.name
        low, _ = _BOUNDS[name]
        if (star := _STAR.fullmatch(item)) is not None:
            step = _step(name, star.group(1))
            if step == 1:
                self.any = True
            else:
                self.terms.append(_Span(low, _TOP[name], step))
            return
        if (hashed := _HASHED.fullmatch(item)) is not None:
            self.terms.append(self._hashed(item, hashed))
            return
        if name == "day-of-month":
            special = self._day_of_month(item)
            if special:
                return
        if name == "day-of-week":
            special = self._day_of_week(item)
            if special:
                return
        span = _SPAN.fullmatch(item)
        if span is None:
            raise _invalid(name, item, "not a value, range, step or list")
        first = _value(name, span.group(1), item)
        step = _step(name, span.group(3))
        if span.group(2) is not None:
            last = _value(name, span.group(2), item)
        elif span.group(3) is not None:
            last = _TOP[name]  # `a/k`: from a to the field's end
        else:
            last = first
        self.terms.append(_span(name, first, last, step))

    def _hashed(self, item: str, found: re.Match[str]) -> _Hashed:
        name = self.name
        step = None if found.group(4) is None else _step(name, found.group(4))
        if found.group(2) is not None:
            low, high = _value(name, found.group(2), item), _value(name, found.group(3), item)
            if low > high:
                raise _invalid(name, item, f"the range of {found.group(1).upper()} must not wrap")
        elif step is not None:
            low, high = _BOUNDS[name][0], _TOP[name]  # `H/k` steps like `*/k`, from a hashed phase
        else:
            low, high = _HASH_SPAN[name]
        return _Hashed(low, high, step, random=found.group(1) == "r")

    def _day_of_month(self, item: str) -> bool:
        if item == "l":
            self.terms.append(_Special("last_day"))
        elif item == "lw":
            self.terms.append(_Special("last_weekday"))
        elif (nearest := _NEAREST.fullmatch(item)) is not None:
            day = _value(self.name, nearest.group(1) or nearest.group(2), item)
            self.terms.append(_Special("nearest", day))
        elif (to_last := _TO_LAST.fullmatch(item)) is not None:
            # croniter reads `a-L` as a..31; days past the month's end do not exist anyway.
            first = _value(self.name, to_last.group(1), item)
            self.terms.append(_Span(first, 31, _step(self.name, to_last.group(2))))
        else:
            return False
        return True

    def _day_of_week(self, item: str) -> bool:
        if (nth := _NTH.fullmatch(item)) is not None:
            count = int(nth.group(3))
            if not 1 <= count <= 5:
                raise _invalid(self.name, item, "a month has a 1st to a 5th of each weekday (#1 to #5)")
            first = _value(self.name, nth.group(1), item)
            last = first if nth.group(2) is None else _value(self.name, nth.group(2), item)
            for weekday in _expand(self.name, _span(self.name, first, last, 1)):
                self.terms.append(_Special("nth", weekday, count))
        elif (last_of := _LAST_OF.fullmatch(item)) is not None:
            weekday = _value(self.name, last_of.group(1) or last_of.group(2), item) % 7
            self.terms.append(_Special("last_of", weekday))
        else:
            return False
        return True


def _invalid(name: FieldName, text: str, why: str) -> InvalidCronExpression:
    return InvalidCronExpression(f"{name} field {text!r}: {why}")


def _step(name: FieldName, text: str | None) -> int:
    if text is None:
        return 1
    step = int(text)
    if step == 0:
        raise _invalid(name, f"/{text}", "a step must be at least 1")
    return step


def _value(name: FieldName, text: str, item: str) -> int:
    low, high = _BOUNDS[name]
    if text.isdigit():
        number = int(text)
    elif (named := _NAMES.get(name, {}).get(text)) is not None:
        number = named
    else:
        raise _invalid(name, item, f"{text!r} is not a number or a {name} name")
    if not low <= number <= high:
        raise _invalid(name, item, f"{number} is outside {low}-{high}")
    return number


def _span(name: FieldName, first: int, last: int, step: int) -> _Span:
    if name == "day-of-week" and first == 7 and last < 7:
        # Sunday as the start of a range counts from the week's start: `7-3` is Sunday to
        # Wednesday and `7/2` is `0/2`, as croniter reads them (`7-7` stays Sunday).
        first = 0
    return _Span(first, last, step)


def _expand(name: FieldName, span: _Span) -> list[int]:
    """The values of a span, in its own order; day-of-week folds 7 into 0."""
    low, _ = _BOUNDS[name]
    if span.first <= span.last:
        values = list(range(span.first, span.last + 1))
    else:  # wraps: first..top, then the field's first value..last, the step counted across the turn
        values = [*range(span.first, _TOP[name] + 1), *range(low, span.last + 1)]
    picked = values[:: span.step]
    return [v % 7 for v in picked] if name == "day-of-week" else picked


# --- the parsed expression ----------------------------------------------------------------------


class CronPattern:
    """A parsed expression: its syntax, before `H` is given the schedule id it hashes."""

    __slots__ = ("_fields", "expression", "hashed", "random")

    def __init__(self, expression: str) -> None:
        parts = expression.lower().split()
        if len(parts) not in (5, 6):
            raise InvalidCronExpression(
                f"invalid cron expression {expression!r}: it has {len(parts)} fields, not 5 or 6"
            )
        if len(parts) == 5:
            parts.insert(0, "0")
        self.expression = expression
        try:
            self._fields = tuple(_FieldSyntax(name, text) for name, text in zip(FIELDS, parts, strict=True))
        except InvalidCronExpression as err:
            raise InvalidCronExpression(f"invalid cron expression {expression!r}: {err}") from None
        terms = [term for field in self._fields for term in field.terms if isinstance(term, _Hashed)]
        #: Uses `H` or `R`: its values depend on the schedule id.
        self.hashed = bool(terms)
        #: Uses `R` (croniter's value drawn at random), read here as `H`.
        self.random = any(term.random for term in terms)

    def fields(self, schedule_id: str | None) -> "CronFields":
        """The allowed values of each field, `H` drawn from ``schedule_id``.

        Raises:
            CronNeedsScheduleId: the expression uses `H` or `R` and no schedule id was given.
        """
        if self.hashed and schedule_id is None:
            raise CronNeedsScheduleId(
                f"the cron expression {self.expression!r} uses H, whose values come from the schedule "
                "id; pass schedule_id so every process computes the same slots"
            )
        # Only an expression with H is drawn per schedule; every other one is shared by all.
        return _fields_of(self, schedule_id if self.hashed and schedule_id is not None else "")


@functools.lru_cache(maxsize=4096)
def parse_expression(expression: str) -> CronPattern:
    """The parsed expression.

    Raises:
        InvalidCronExpression: the expression is not in slotflow's cron grammar (the message names
            the field and what is wrong with it).
    """
    return CronPattern(expression)


def hash_draw(schedule_id: str, field: FieldName) -> int:
    """64 bits fixed by the schedule id and the field: SHA-256 of ``"{schedule_id}/{field}"``.

    Never Python's `hash()`, which is salted per process: every ticker and api must draw alike.
    """
    digest = hashlib.sha256(f"{schedule_id}/{field}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _pick(draw: int, low: int, high: int) -> int:
    # (draw * span) >> 64 maps 64 uniform bits onto [low, high] without modulo bias.
    return low + (draw * (high - low + 1) >> 64)


def _values_of(field: _FieldSyntax, schedule_id: str) -> tuple[int, ...] | None:
    """The plain values a field allows, sorted; None when it allows every value."""
    if field.any:
        return None
    values: set[int] = set()
    for term in field.terms:
        if isinstance(term, _Span):
            values.update(_expand(field.name, term))
        elif isinstance(term, _Hashed):
            # Every H of a field shares the field's draw; each maps it onto its own range.
            draw = hash_draw(schedule_id, field.name)
            if term.step is None:
                picked = _pick(draw, term.low, term.high)
                values.add(picked % 7 if field.name == "day-of-week" else picked)
            else:
                phase = _pick(draw, term.low, min(term.low + term.step - 1, term.high))
                values.update(_expand(field.name, _Span(phase, term.high, term.step)))
    return tuple(sorted(values))


@functools.lru_cache(maxsize=4096)
def _fields_of(pattern: CronPattern, schedule_id: str) -> "CronFields":
    second, minute, hour, day, month, weekday = pattern._fields
    return CronFields(
        seconds=_values_of(second, schedule_id),
        minutes=_values_of(minute, schedule_id),
        hours=_values_of(hour, schedule_id),
        months=_values_of(month, schedule_id),
        days=_DayRule(
            plain=_values_of(day, schedule_id),
            specials=tuple(t for t in day.terms if isinstance(t, _Special)),
            restricted=day.restricted,
        ),
        weekdays=_DayRule(
            plain=_values_of(weekday, schedule_id),
            specials=tuple(t for t in weekday.terms if isinstance(t, _Special)),
            restricted=weekday.restricted,
        ),
    )


@dataclass(frozen=True, slots=True)
class _DayRule:
    """One day field: its plain values (None: any), its `L`/`W`/`#` forms, and whether it restricts."""

    plain: tuple[int, ...] | None
    specials: tuple[_Special, ...]
    restricted: bool

    @property
    def everything(self) -> bool:
        """A `*` anywhere in the field: every day, whatever else it lists."""
        return self.plain is None


#: Months whose matching days one CronFields keeps (cleared whole when full). A ticker's walk
#: touches a month or two; a rare expression searched over decades recomputes them, cheaply.
_MONTHS_KEPT = 120


class CronFields:
    """An expression as sets of allowed values, with `H` already drawn: answers `next_after`."""

    __slots__ = ("_days", "_month_days", "_weekdays", "hours", "minutes", "months", "seconds")

    def __init__(
        self,
        *,
        seconds: tuple[int, ...] | None,
        minutes: tuple[int, ...] | None,
        hours: tuple[int, ...] | None,
        months: tuple[int, ...] | None,
        days: _DayRule,
        weekdays: _DayRule,
    ) -> None:
        self.seconds = seconds if seconds is not None else tuple(range(60))
        self.minutes = minutes if minutes is not None else tuple(range(60))
        self.hours = hours if hours is not None else tuple(range(24))
        self.months = months if months is not None else tuple(range(1, 13))
        self._days = days
        self._weekdays = weekdays
        self._month_days: dict[tuple[int, int], tuple[int, ...]] = {}

    def allowed(self, field: FieldName) -> tuple[int, ...]:
        """The plain values a field allows, ascending (day fields: without their `L`/`W`/`#` forms;
        day-of-week counts Sunday as 0)."""
        if field == "day-of-month" or field == "day-of-week":
            rule = self._days if field == "day-of-month" else self._weekdays
            every = range(1, 32) if field == "day-of-month" else range(7)
            return tuple(every) if rule.plain is None else rule.plain
        return {"second": self.seconds, "minute": self.minutes, "hour": self.hours, "month": self.months}[
            field
        ]

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """The days of that month the day fields allow, ascending."""
        key = (year, month)
        found = self._month_days.get(key)
        if found is None:
            if len(self._month_days) >= _MONTHS_KEPT:
                self._month_days.clear()
            found = self._month_days[key] = self._compute_month_days(year, month)
        return found

    def _compute_month_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, length = calendar.monthrange(year, month)
        # calendar counts Monday as 0, cron counts Sunday as 0: day d falls on cron weekday
        # (first + d) % 7 when the month's first day is calendar weekday `first`.
        days, weekdays = self._days, self._weekdays
        everything = set(range(1, length + 1))
        by_date = everything if days.everything else _dates(days, first_weekday, length)
        by_weekday = everything if weekdays.everything else _weekday_dates(weekdays, first_weekday, length)
        chosen = by_date | by_weekday if days.restricted and weekdays.restricted else by_date & by_weekday
        return tuple(sorted(chosen))

    def matches(self, wall: datetime) -> bool:
        """Whether a naive wall time (whole seconds) matches every field."""
        return (
            wall.microsecond == 0
            and wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and wall.day in self.month_days(wall.year, wall.month)
        )

    def next_after(self, start: datetime) -> datetime | None:
        """The first matching naive wall time strictly after `start`, or None.

        None when nothing matches within `MAX_YEARS_BETWEEN_MATCHES` years or before year 10000.
        """
        if start >= datetime(_LAST_YEAR, 12, 31, 23, 59, 59):  # noqa: DTZ001 - naive wall time
            return None
        begin = start.replace(microsecond=0) + _SECOND
        year, month, day = begin.year, begin.month, begin.day
        hour, minute, second = begin.hour, begin.minute, begin.second
        give_up = min(year + MAX_YEARS_BETWEEN_MATCHES, _LAST_YEAR)
        months, hours, minutes, seconds = self.months, self.hours, self.minutes, self.seconds
        while year <= give_up:
            # Each step either accepts the current field or moves to the next candidate of the
            # field above and resets everything below it, then checks again from the top.
            index = bisect_left(months, month)
            if index == len(months):
                year, month, day, hour, minute, second = year + 1, months[0], 1, 0, 0, 0
                continue
            if months[index] != month:
                month, day, hour, minute, second = months[index], 1, 0, 0, 0
            days = self.month_days(year, month)
            index = bisect_left(days, day)
            if index == len(days):
                month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                if month > 12:
                    year, month = year + 1, 1
                continue
            if days[index] != day:
                day, hour, minute, second = days[index], 0, 0, 0
            index = bisect_left(hours, hour)
            if index == len(hours):
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if hours[index] != hour:
                hour, minute, second = hours[index], 0, 0
            index = bisect_left(minutes, minute)
            if index == len(minutes):
                hour, minute, second = hour + 1, 0, 0
                continue
            if minutes[index] != minute:
                minute, second = minutes[index], 0
            index = bisect_left(seconds, second)
            if index == len(seconds):
                minute, second = minute + 1, 0
                continue
            return datetime(year, month, day, hour, minute, seconds[index])  # noqa: DTZ001
        return None


def _dates(rule: _DayRule, first_weekday: int, length: int) -> set[int]:
    """The days of a month the day-of-month field names (the month: its first weekday, its length)."""
    found = {d for d in rule.plain or () if d <= length}
    for special in rule.specials:
        if special.kind == "last_day":
            found.add(length)
        elif special.kind == "last_weekday":
            found.add(_nearest_weekday(length, first_weekday, length))
        elif special.kind == "nearest":
            found.add(_nearest_weekday(min(special.value, length), first_weekday, length))
    return found


def _nearest_weekday(day: int, first_weekday: int, length: int) -> int:
    """The Monday-to-Friday day nearest `day`, never leaving the month (Quartz's `W`)."""
    weekday = (first_weekday + day - 1) % 7  # calendar's: Monday 0 .. Sunday 6
    if weekday == 5:  # Saturday: the Friday before, or the Monday after when the 1st is a Saturday
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before at the month's end
        return day + 1 if day < length else day - 2
    return day


def _weekday_dates(rule: _DayRule, first_weekday: int, length: int) -> set[int]:
    """The days of the month the day-of-week field names."""
    first_cron = (first_weekday + 1) % 7  # the cron weekday of the 1st
    found: set[int] = set()
    for weekday in rule.plain or ():
        found.update(range(1 + (weekday - first_cron) % 7, length + 1, 7))
    for special in rule.specials:
        first = 1 + (special.value - first_cron) % 7  # the first such weekday of the month
        if special.kind == "nth":
            day = first + 7 * (special.nth - 1)
            if day <= length:
                found.add(day)
        elif special.kind == "last_of":
            found.add(first + 7 * ((length - first) // 7))
    return found
