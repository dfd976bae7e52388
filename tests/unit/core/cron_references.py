"""croniter and cronsim as references, and the documented ways slotflow reads cron differently.

docs/scheduling.md lists each difference ("Where slotflow reads cron differently"). The functions
here name the ones an expression hits, so a differential test leaves out exactly those and nothing
else. They decide from the references' own parsers where they can (`croniter.expand`), so an
undocumented difference cannot hide behind a broad rule.
"""

import itertools
import re
from datetime import UTC, datetime

from croniter import CroniterBadDateError, croniter
from cronsim import CronSim, CronSimError

from slotflow.contracts.policies import DstPolicy
from slotflow.core._cronfields import FIELDS, parse_expression

_EVERY = {
    "second": set(range(60)),
    "minute": set(range(60)),
    "hour": set(range(24)),
    "day-of-month": set(range(1, 32)),
    "month": set(range(1, 13)),
    "day-of-week": set(range(7)),
}
_HASHED = re.compile(r"[hr](\(\d+-\d+\))?(/\d+)?")


def _parts(expression: str) -> list[str]:
    parts = expression.lower().split()
    return parts if len(parts) == 6 else ["0", *parts]


def croniter_accepts(expression: str) -> bool:
    return bool(croniter.is_valid(expression, second_at_beginning=len(expression.split()) == 6))


def cronsim_accepts(expression: str) -> bool:
    try:
        CronSim(expression, datetime(2026, 1, 1))  # noqa: DTZ001 - naive wall time
    except CronSimError:
        return False
    return True


def croniter_differences(expression: str) -> list[str]:
    """The documented differences from croniter 7 that ``expression`` hits ([] if none)."""
    parts = _parts(expression)
    dom, dow = parts[3], parts[5]
    found: list[str] = []
    if any(_HASHED.fullmatch(item) for part in parts for item in part.split(",")):
        return ["H and R: slotflow draws from the schedule id"]
    expanded, _ = croniter.expand(expression, second_at_beginning=len(expression.split()) == 6)
    if len(expression.split()) == 5:
        expanded = [*expanded, [0]]
    theirs = [expanded[5], *expanded[:5]]
    ours = parse_expression(expression).fields(None)
    for index, name in enumerate(FIELDS):
        if (index == 3 and "w" in dom) or (index == 5 and re.search(r"[l#]", dow)):
            continue  # croniter keeps those days apart from the field's values
        values = {v % 7 if name == "day-of-week" else v for v in theirs[index] if isinstance(v, int)}
        if "*" in theirs[index]:
            values = set(_EVERY[name])
        if values != set(ours.allowed(name)):
            found.append(f"{name} values (an equal range, or a wrapping range with a step)")
    croniter_or = expanded[2][0] != "*" and expanded[4][0] != "*"
    our_or = not dom.startswith(("*", "?")) and not dow.startswith(("*", "?"))
    if croniter_or != our_or:
        found.append("the day rule (a day field starting with * does not restrict; a full list does)")
    elif our_or and (re.search(r"w", dom) or re.search(r"[l#]", dow)):
        found.append("#, W and L weekdays OR with the other day field")
    forms = [item for item in dow.split(",") if re.search(r"[l#]", item)]
    if forms and len(forms) < len(dow.split(",")):
        found.append("#/L weekdays listed with plain weekdays")
    return found


def cronsim_differences(expression: str) -> list[str]:
    """The documented differences from cronsim 2.9 that ``expression`` hits ([] if none)."""
    dow = _parts(expression)[5]
    if any(re.fullmatch(r"(\d+|[a-z]{3})/\d+", item) for item in dow.split(",")):
        return ["a/k in day-of-week runs to Saturday"]
    return []


def croniter_walls(expression: str, after: datetime, count: int) -> list[datetime]:
    """croniter's next `count` times after `after` (naive: wall times; aware: its DST handling)."""
    walker = croniter(expression, after, ret_type=datetime, second_at_beginning=len(expression.split()) == 6)
    found: list[datetime] = []
    for _ in range(count):
        try:
            found.append(walker.get_next(datetime))
        except (CroniterBadDateError, ValueError, OverflowError):
            break
    return found


def cronsim_walls(expression: str, after: datetime, count: int) -> list[datetime]:
    """cronsim's next `count` times after `after` (it stops after 50 years without a match)."""
    return list(itertools.islice(CronSim(expression, after), count))


def croniter_until(expression: str, after: datetime, until: datetime, *, cap: int = 20_000) -> list[datetime]:
    """croniter's times in (after, until] from an aware start, in UTC (at most `cap`)."""
    walker = croniter(expression, after, ret_type=datetime, second_at_beginning=len(expression.split()) == 6)
    found: list[datetime] = []
    while len(found) < cap:
        try:
            at = walker.get_next(datetime).astimezone(UTC)
        except (CroniterBadDateError, ValueError, OverflowError):
            break
        if at > until:
            break
        found.append(at)
    return found


def cronsim_until(expression: str, after: datetime, until: datetime, *, cap: int = 20_000) -> list[datetime]:
    """cronsim's times in (after, until] from an aware start, in UTC (at most `cap`)."""
    found: list[datetime] = []
    for at in itertools.islice(CronSim(expression, after), cap):
        if at.astimezone(UTC) > until:
            break
        found.append(at.astimezone(UTC))
    return found


def cronsim_dst_policy(expression: str) -> DstPolicy:
    """The DstPolicy that fires what cronsim fires around a DST change (Debian cron's rule).

    A 5-field expression whose minute and hour do not start with `*` gets Debian's fix-up: a wall
    time that does not exist fires at the end of the gap, a repeated one once. Any other steps
    through real time: a missing wall time never shows, a repeated one shows twice.
    """
    parts = expression.split()
    if len(parts) == 5 and not parts[0].startswith("*") and not parts[1].startswith("*"):
        return DstPolicy(repeated="first", nonexistent="shift")
    return DstPolicy(repeated="both", nonexistent="skip")
