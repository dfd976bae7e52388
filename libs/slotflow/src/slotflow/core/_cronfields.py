"""Next naive wall time matching plain cron fields: a search over sets of integers, not croniter's.

croniter parses (it also validates `CronSpec`), and still walks the expressions this module does
not handle: `L`, `W` and `#`. Everything else (lists, ranges, steps, names, `?`) arrives here as
sets of integers. Day-of-month and day-of-week combine as in Vixie cron and croniter: when both
are restricted a day matching either fires.
"""

import calendar
from bisect import bisect_left
from collections.abc import Sequence
from datetime import datetime, timedelta

from croniter import croniter

#: Like croniter: an expression with no match within this many years has no next slot.
MAX_YEARS_BETWEEN_MATCHES = 50
_LAST_YEAR = 9999
_SECOND = timedelta(seconds=1)


def _any(field: Sequence[object]) -> bool:
    """Whether a field allows every value: a `*` anywhere in its list (`*,5` is every minute, as in
    Vixie cron, croniter and cronsim; the other items add nothing)."""
    return "*" in field


def _values(field: Sequence[object], low: int, high: int) -> list[int] | None:
    """Sorted allowed values; None for any value."""
    if _any(field):
        return None
    values = sorted({value for value in field if isinstance(value, int)})
    return values if values != list(range(low, high + 1)) else None


class CronFields:
    """A plain cron expression as sets of allowed values per field."""

    def __init__(
        self,
        *,
        seconds: list[int] | None,
        minutes: list[int] | None,
        hours: list[int] | None,
        days: list[int] | None,
        months: list[int] | None,
        weekdays: list[int] | None,
    ) -> None:
        self.seconds = seconds if seconds is not None else list(range(60))
        self.minutes = minutes if minutes is not None else list(range(60))
        self.hours = hours if hours is not None else list(range(24))
        self.months = months if months is not None else list(range(1, 13))
        self._days = set(days) if days is not None else None
        self._weekdays = set(weekdays) if weekdays is not None else None

    @classmethod
    def parse(cls, expression: str) -> "CronFields | None":
        """The fields of `expression`, or None when it uses `L`, `W` or `#` (croniter walks those)."""
        parts = expression.split()
        six = len(parts) == 6
        expanded, nth_weekday = croniter.expand(expression, second_at_beginning=six)
        day_text = parts[3 if six else 2].lower()
        if nth_weekday or "w" in day_text or "l" in day_text:
            return None
        if any(value != "*" and not isinstance(value, int) for field in expanded for value in field):
            return None
        minute, hour, day, month, weekday = expanded[:5]
        return cls(
            seconds=_values(expanded[5], 0, 59) if six else [0],
            minutes=_values(minute, 0, 59),
            hours=_values(hour, 0, 23),
            # "*" must stay "any" here and not become 1-31: it decides whether days OR together.
            days=None if _any(day) else sorted(v for v in day if isinstance(v, int)),
            months=_values(month, 1, 12),
            weekdays=None if _any(weekday) else sorted({v % 7 for v in weekday if isinstance(v, int)}),
        )

    def _day_matches(self, first_weekday: int, day: int) -> bool:
        in_days = self._days is None or day in self._days
        # Cron counts Sunday as 0 and calendar Monday as 0, so day d of a month whose first day is
        # calendar weekday w falls on cron weekday (w + (d - 1) + 1) % 7.
        in_weekdays = self._weekdays is None or (first_weekday + day) % 7 in self._weekdays
        if self._days is not None and self._weekdays is not None:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def next_after(self, start: datetime) -> datetime | None:
        """The first matching naive wall time strictly after `start`, or None."""
        begin = start.replace(microsecond=0) + _SECOND
        year, month, day = begin.year, begin.month, begin.day
        hour, minute, second = begin.hour, begin.minute, begin.second
        give_up = min(year + MAX_YEARS_BETWEEN_MATCHES, _LAST_YEAR)
        while year <= give_up:
            # Each step below either accepts the current field or moves to the next candidate of
            # the field above and resets everything below it, then re-checks from the top.
            index = bisect_left(self.months, month)
            if index == len(self.months):
                year, month, day, hour, minute, second = year + 1, self.months[0], 1, 0, 0, 0
                continue
            if self.months[index] != month:
                month, day, hour, minute, second = self.months[index], 1, 0, 0, 0
            first_weekday, days_in_month = calendar.monthrange(year, month)
            found = next(
                (d for d in range(day, days_in_month + 1) if self._day_matches(first_weekday, d)), None
            )
            if found is None:
                month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                if month > 12:
                    year, month = year + 1, 1
                continue
            if found != day:
                day, hour, minute, second = found, 0, 0, 0
            index = bisect_left(self.hours, hour)
            if index == len(self.hours):
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if self.hours[index] != hour:
                hour, minute, second = self.hours[index], 0, 0
            index = bisect_left(self.minutes, minute)
            if index == len(self.minutes):
                hour, minute, second = hour + 1, 0, 0
                continue
            if self.minutes[index] != minute:
                minute, second = self.minutes[index], 0
            index = bisect_left(self.seconds, second)
            if index == len(self.seconds):
                minute, second = minute + 1, 0
                continue
            return datetime(year, month, day, hour, minute, self.seconds[index])  # noqa: DTZ001
        return None
