"""How slotflow read a cron expression before it had its own cron rules, kept to test the review.

This is the earlier code, unchanged but for being one module: croniter parsed every expression and
walked those with `L`, `W` or `#`; slotflow's field search took the rest from `croniter.expand`,
keeping only the numbers of a list that held a `*`. Naive wall times only (UTC in the tests).
slotflow_ticker.cron_review must name every way the current rules read an expression differently;
tests/unit/ticker/test_cron_review.py holds it to this.
"""

import calendar
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

from croniter import CroniterBadDateError, croniter

MAX_YEARS_BETWEEN_MATCHES = 50
_LAST_YEAR = 9999
_SECOND = timedelta(seconds=1)


def _values(field: Sequence[object], low: int, high: int) -> list[int] | None:
    if list(field) == ["*"]:
        return None
    values = sorted({value for value in field if isinstance(value, int)})
    return values if values != list(range(low, high + 1)) else None


class _LegacyFields:
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
    def parse(cls, expression: str) -> "_LegacyFields | None":
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
            days=None if list(day) == ["*"] else sorted(v for v in day if isinstance(v, int)),
            months=_values(month, 1, 12),
            weekdays=None
            if list(weekday) == ["*"]
            else sorted({v % 7 for v in weekday if isinstance(v, int)}),
        )

    def _day_matches(self, first_weekday: int, day: int) -> bool:
        in_days = self._days is None or day in self._days
        in_weekdays = self._weekdays is None or (first_weekday + day) % 7 in self._weekdays
        if self._days is not None and self._weekdays is not None:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def next_after(self, start: datetime) -> datetime | None:
        begin = start.replace(microsecond=0) + _SECOND
        year, month, day = begin.year, begin.month, begin.day
        hour, minute, second = begin.hour, begin.minute, begin.second
        give_up = min(year + MAX_YEARS_BETWEEN_MATCHES, _LAST_YEAR)
        while year <= give_up:
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


def legacy_walk(expression: str, after: datetime) -> Iterator[datetime]:
    """The naive wall times the old code fired `expression` at, after `after`."""
    fields = _LegacyFields.parse(expression)
    current = after.replace(microsecond=0)
    if fields is not None:
        while (found := fields.next_after(current)) is not None:
            yield found
            current = found
        return
    walker = croniter(
        expression, current, ret_type=datetime, second_at_beginning=len(expression.split()) == 6
    )
    while True:
        try:
            yield walker.get_next(datetime)
        except (CroniterBadDateError, ValueError, OverflowError):
            return
