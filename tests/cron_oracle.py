"""The cron semantics docs/scheduling.md documents, written a second time for the tests.

Two oracles, sharing no code with slotflow.core (not its parser, its field search, nor its mapping
of wall times to instants):

- `CronOracle` says which local wall times an expression matches. It decides one date at a time by
  date arithmetic (`date.isoweekday()`, "a week later is another month" for last, counting weeks
  for `#n`), where slotflow builds each month's set of days from its first weekday.
- `expected_slots` applies the documented DST policy. It reads the zone's clock at UTC instants
  (`astimezone`) to find which instants show a wall time, and bisects those readings for the end
  of a gap, where slotflow maps wall times with `fold` and bisects the zone's offset.

The differential tests (tests/unit/core/test_cron_differential.py) hold slotflow, croniter and
cronsim to these; the system fault suite's checker (tests/chaos/system/checker.py) computes the
slots it expects with them.
"""

import hashlib
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal, NamedTuple
from zoneinfo import ZoneInfo

FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_LOW = (0, 0, 0, 1, 1, 0)
_HIGH = (59, 59, 23, 31, 12, 7)
#: Where `*`, `*/k` and `a/k` stop, and where a wrapping range turns (docs: the week is 0-6).
_TOP = (59, 59, 23, 31, 12, 6)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DOM, _DOW = 3, 5

Repeated = Literal["first", "last", "both"]
Nonexistent = Literal["shift", "skip"]


class OracleSlot(NamedTuple):
    at: datetime
    local: str
    dst: str | None


class OracleSkip(NamedTuple):
    at: datetime
    #: The nominal wall time that does not exist.
    wall: datetime


def _number(field: int, text: str) -> int:
    if field == 4 and text in _MONTHS:
        return _MONTHS.index(text) + 1
    if field == _DOW and text in _WEEKDAYS:
        return _WEEKDAYS.index(text)
    value = int(text)
    if not _LOW[field] <= value <= _HIGH[field]:
        raise ValueError(f"{text} is out of range for {FIELD_NAMES[field]}")
    return value


def _hash_value(schedule_id: str, field: int, low: int, high: int) -> int:
    """docs/scheduling.md: the first 8 bytes of SHA-256("{schedule id}/{field}"), big-endian, d;
    the value is low + floor(d * (high - low + 1) / 2**64)."""
    digest = hashlib.sha256(f"{schedule_id}/{FIELD_NAMES[field]}".encode()).digest()
    return low + int.from_bytes(digest[:8], "big") * (high - low + 1) // 2**64


def _values(field: int, item: str, schedule_id: str | None) -> set[int]:
    """The plain values one list item names (no `L`, `W` or `#`)."""
    if item[0] in "hr":
        if schedule_id is None:
            raise ValueError("H needs a schedule id")
        body, _, step_text = item[1:].partition("/")
        if body:
            low, high = (int(v) for v in body.strip("()").split("-"))
        elif step_text:
            low, high = _LOW[field], _TOP[field]
        else:
            low, high = _LOW[field], (28 if field == _DOM else _TOP[field])
        if step_text:
            step = int(step_text)
            start = _hash_value(schedule_id, field, low, min(low + step - 1, high))
            picked = list(range(start, high + 1, step))
        else:
            picked = [_hash_value(schedule_id, field, low, high)]
    else:
        base, slash, step_text = item.partition("/")
        step = int(step_text) if slash else 1
        if base in ("*", "?"):
            sequence = list(range(_LOW[field], _TOP[field] + 1))
        elif "-" in base:
            first_text, last_text = base.split("-")
            first = _number(field, first_text)
            last = 31 if field == _DOM and last_text == "l" else _number(field, last_text)
            if field == _DOW and first == 7 and last < 7:
                first = 0
            if first <= last:
                sequence = list(range(first, last + 1))
            else:
                sequence = list(range(first, _TOP[field] + 1)) + list(range(_LOW[field], last + 1))
        else:
            first = _number(field, base)
            if slash and field == _DOW and first == 7:
                first = 0
            sequence = list(range(first, _TOP[field] + 1)) if slash else [first]
        picked = sequence[::step]
    return {v % 7 for v in picked} if field == _DOW else set(picked)


def _special(field: int, item: str) -> bool:
    """`L`, `LW` and `W` in day-of-month, `#` and `L` in day-of-week: decided per date."""
    if field == _DOM:
        return item in ("l", "lw") or "w" in item
    return field == _DOW and ("#" in item or "l" in item)


def _last_day(day: date) -> bool:
    return (day + timedelta(days=1)).month != day.month


def _weekday(day: date) -> int:
    return day.isoweekday() % 7  # cron's: Sunday 0


def _nearest_weekday(year: int, month: int, wanted: int) -> date:
    """The weekday (Monday to Friday) nearest day `wanted` of the month, inside the month."""
    target = date(year, month, 1)
    while target.day < wanted and not _last_day(target):
        target += timedelta(days=1)
    if target.isoweekday() == 6:
        return target - timedelta(days=1) if target.day > 1 else target + timedelta(days=2)
    if target.isoweekday() == 7:
        return target - timedelta(days=2) if _last_day(target) else target + timedelta(days=1)
    return target


class CronOracle:
    """Which wall times an expression matches, by the documented rules."""

    def __init__(self, expression: str, schedule_id: str | None = None) -> None:
        parts = expression.lower().split()
        if len(parts) == 5:
            parts = ["0", *parts]
        self.everything = [False] * 6
        self.plain: list[set[int]] = []
        self.specials: list[list[str]] = []
        for field, text in enumerate(parts):
            plain: set[int] = set()
            specials: list[str] = []
            for item in text.split(","):
                if item in ("*", "?"):
                    self.everything[field] = True
                elif _special(field, item):
                    specials.append(item)
                else:
                    plain |= _values(field, item, schedule_id)
            self.plain.append(plain)
            self.specials.append(specials)
        #: Vixie's rule: a day field starting with `*` or `?` does not restrict the day.
        self.restricted = [not parts[f].startswith(("*", "?")) for f in range(6)]

    def _allows(self, field: int, value: int) -> bool:
        return self.everything[field] or value in self.plain[field]

    def _day_of_month(self, day: date) -> bool:
        if self._allows(_DOM, day.day):
            return True
        for item in self.specials[_DOM]:
            if item == "l" and _last_day(day):
                return True
            if item == "lw" and day == _nearest_weekday(day.year, day.month, 31):
                return True
            if item not in ("l", "lw") and day == _nearest_weekday(day.year, day.month, int(item.strip("w"))):
                return True
        return False

    def _day_of_week(self, day: date) -> bool:
        if self._allows(_DOW, _weekday(day)):
            return True
        for item in self.specials[_DOW]:
            if "#" in item:
                names, count = item.split("#")
                if (day.day - 1) // 7 + 1 == int(count) and _weekday(day) in _values(_DOW, names, None):
                    return True
            elif (
                _weekday(day) == _number(_DOW, item.strip("l")) % 7
                and (day + timedelta(days=7)).month != day.month
            ):
                return True
        return False

    def day_matches(self, day: date) -> bool:
        if not self._allows(4, day.month):
            return False
        by_date, by_weekday = self._day_of_month(day), self._day_of_week(day)
        if self.restricted[_DOM] and self.restricted[_DOW]:
            return by_date or by_weekday
        return by_date and by_weekday

    def matches(self, wall: datetime) -> bool:
        """Whether a naive wall time matches every field."""
        return (
            wall.microsecond == 0
            and self._allows(0, wall.second)
            and self._allows(1, wall.minute)
            and self._allows(2, wall.hour)
            and self.day_matches(wall.date())
        )

    def _times(self) -> list[time]:
        def values(field: int) -> list[int]:
            return (
                list(range(_LOW[field], _TOP[field] + 1))
                if self.everything[field]
                else sorted(self.plain[field])
            )

        return [time(h, m, s) for h in values(2) for m in values(1) for s in values(0)]

    def wall_times(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Matching naive wall times in (after, until], ascending."""
        times = self._times()
        day = after.date()
        while day <= until.date():
            if self.day_matches(day):
                for moment in times:
                    wall = datetime.combine(day, moment)
                    if after < wall <= until:
                        yield wall
            day += timedelta(days=1)

    def next_wall_times(self, after: datetime, count: int, *, years: int = 50) -> list[datetime]:
        """The first `count` matches after `after` within `years` years (docs: the horizon)."""
        found: list[datetime] = []
        until = datetime(min(after.year + years, 9999), 12, 31, 23, 59, 59)  # noqa: DTZ001 - wall time
        for wall in self.wall_times(after, until):
            found.append(wall)
            if len(found) == count:
                break
        return found


# --- the DST policy -----------------------------------------------------------------------------


def reading(instant: datetime, zone: ZoneInfo) -> datetime:
    """What the zone's clock shows at a UTC instant."""
    return instant.astimezone(zone).replace(tzinfo=None)


def offsets_near(wall: datetime, zone: ZoneInfo) -> set[timedelta]:
    """Every UTC offset the zone uses within a day and a bit of `wall` (read as UTC)."""
    guess = wall.replace(tzinfo=UTC)
    found = {(guess + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(-30, 31, 3)}
    return {o for o in found if o is not None}


def instants_showing(wall: datetime, zone: ZoneInfo, offsets: set[timedelta] | None = None) -> list[datetime]:
    """Every UTC instant at which the zone's clock reads `wall`: none, one, or two."""
    guess = wall.replace(tzinfo=UTC)
    tried = offsets if offsets is not None else offsets_near(wall, zone)
    return sorted({guess - o for o in tried if reading(guess - o, zone) == wall})


def first_instant_after(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first whole-second instant whose reading is later than `wall` (the end of its gap)."""
    low = int((wall.replace(tzinfo=UTC) - timedelta(hours=15)).timestamp())
    high = int((wall.replace(tzinfo=UTC) + timedelta(hours=15)).timestamp())
    while high - low > 1:  # reading(low) <= wall < reading(high)
        middle = (low + high) // 2
        if reading(datetime.fromtimestamp(middle, UTC), zone) > wall:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def expected_slots(
    expression: str,
    zone_name: str,
    *,
    after: datetime,
    until: datetime,
    repeated: Repeated = "first",
    nonexistent: Nonexistent = "shift",
    schedule_id: str | None = None,
) -> tuple[list[OracleSlot], list[OracleSkip]]:
    """The slots in (after, until] by the documented policy, and the wall times `skip` drops."""
    zone = ZoneInfo(zone_name)
    oracle = CronOracle(expression, schedule_id)
    walls = oracle.wall_times(
        reading(after, zone) - timedelta(hours=2), reading(until, zone) + timedelta(hours=2)
    )
    # The offsets in use around the window, found once: a wall time is shown at wall - offset.
    offsets = offsets_near(reading(after, zone), zone) | offsets_near(reading(until, zone), zone)
    chosen: dict[datetime, OracleSlot] = {}
    gaps: list[OracleSkip] = []
    for wall in walls:
        shown = instants_showing(wall, zone, offsets)
        if len(shown) == 1:
            chosen[shown[0]] = OracleSlot(shown[0], shown[0].astimezone(zone).isoformat(), None)
        elif len(shown) == 2:
            first, second = shown
            if repeated in ("first", "both"):
                chosen[first] = OracleSlot(first, first.astimezone(zone).isoformat(), "repeated-first")
            if repeated in ("last", "both"):
                chosen[second] = OracleSlot(second, second.astimezone(zone).isoformat(), "repeated-second")
        else:
            gaps.append(OracleSkip(first_instant_after(wall, zone), wall))
    skips: list[OracleSkip] = []
    for gap in gaps:
        if not after < gap.at <= until:
            continue
        if nonexistent == "skip":
            skips.append(gap)
        else:
            # Every nominal time of a gap lands on its end; a real slot there, or the earliest
            # nominal time, stands for all of them.
            offset = gap.at.astimezone(zone).isoformat()[-6:]
            chosen.setdefault(gap.at, OracleSlot(gap.at, gap.wall.isoformat() + offset, "shifted"))
    slots = [chosen[at] for at in sorted(chosen) if after < at <= until]
    return slots, skips
