"""Stored schedules whose cron expression reads differently under this version's cron rules.

Before, croniter parsed every expression and walked the `L`, `W` and `#` forms, and slotflow's field
search dropped a `*` inside a list. Now slotflow reads cron with its own documented rules
(docs/scheduling.md, "Cron expressions"), and a few expressions mean something else: `R` (drawn at
random in each process) is read as `H`, `*,5` is every minute, `0 9 1 * 1#1` fires on the 1st too,
`jan-jan` is January, `0 0 */2 * 1` is odd-numbered Mondays.

A schedule stored under the old rules must not start firing at other times because the ticker was
upgraded, nor stop without a word. So each stored row is reviewed once (`cron_rules` below
`CRON_RULES`): one whose expression reads differently is paused, with a reason naming each change,
a `SchedulePaused` event and a warning in the log; its owner checks the expression and resumes it
(or updates it). Every other row is only marked. No ticker of this version claims a row before its
review (the claim skips it), so nothing fires under a reading nobody chose.
"""

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from croniter import croniter
from pydantic import ValidationError

from slotflow.contracts import SchedulePaused
from slotflow.contracts.envelope import fit_id
from slotflow.core._cronfields import FIELDS, parse_expression
from slotflow.pg.pool import Pool
from slotflow_ticker.events import EventFactory, Outgoing, stage_all
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.rows import parse_definition
from slotflow_ticker.sql import CRON_RULES, Queries

log = logging.getLogger(__name__)

_DOM, _DOW = 3, 5
_RANDOM = re.compile(r"r(?:\(\d+-\d+\))?(?:/\d+)?")
#: A pause reason is at most this long (PauseSchedule's limit).
_REASON_CHARS = 1000


def reading_changes(expression: str) -> list[str]:
    """Each way this version reads ``expression`` differently from the rules before; [] if none.

    The rules before: croniter's parser (`croniter.expand`), croniter's walk for expressions with
    `L`, `W` or `#`, and slotflow's field search for the rest, which kept only the numbers of a
    list holding a `*`. Each field's values are compared with croniter's expansion; the ways the
    day fields combine are checked rule by rule. The tests hold every expression without a listed
    change to the same slots under both readings.
    """
    parts = expression.lower().split()
    six = len(parts) == 6
    try:
        # Only what croniter accepted could have been stored under the old rules.
        expanded, _ = croniter.expand(expression, second_at_beginning=six)
        pattern = parse_expression(expression)
    except (ValueError, KeyError, TypeError):
        return []
    if not six:
        parts.insert(0, "0")
        expanded = [*expanded, [0]]
    # croniter's order is minute, hour, day, month, weekday, second; ours starts with the second.
    old_fields = [expanded[5], *expanded[:5]]
    items = [text.split(",") for text in parts]
    dom, dow = parts[_DOM], parts[_DOW]
    # croniter walked these itself; the field search took every other expression.
    walked = bool(re.search(r"[lw]", dom) or re.search(r"[l#]", dow))
    changes: list[str] = []

    if pattern.random:
        changes.append(
            "R is now read as H, a value fixed by the schedule id (it was drawn at random in each "
            "process, so tickers disagreed)"
        )
    new_fields = pattern.fields("")  # an R field is skipped below: its draw does not matter
    for index, (name, field) in enumerate(zip(FIELDS, items, strict=True)):
        if any(_RANDOM.fullmatch(item) for item in field):
            continue  # R: said above
        if (index == _DOM and re.search(r"w", dom)) or (index == _DOW and re.search(r"[l#]", dow)):
            continue  # croniter kept these days apart from the field's values; see below
        old = _old_values(old_fields[index], name, walked)
        new = set(new_fields.allowed(name))
        if old != new:
            changes.append(f"{name} {parts[index]!r} now allows {_listed(new)}; it allowed {_listed(old)}")

    weekday_forms = [item for item in items[_DOW] if re.search(r"[l#]", item)]
    if weekday_forms and len(weekday_forms) < len(items[_DOW]):
        changes.append(
            f"day-of-week {dow!r}: every weekday it lists now fires; croniter fired only the "
            f"{', '.join(weekday_forms)} days"
        )

    # croniter's expansion says how the old code combined the day fields. The field search ORed
    # them unless one expanded to exactly `*`; croniter's walk unless one began with `*`.
    old_day_expanded, old_weekday_expanded = expanded[2], expanded[4]
    if walked:
        old_or = old_day_expanded[0] != "*" and old_weekday_expanded[0] != "*"
    else:
        old_or = list(old_day_expanded) != ["*"] and list(old_weekday_expanded) != ["*"]
    new_or = not dom.startswith(("*", "?")) and not dow.startswith(("*", "?"))
    if old_or != new_or:
        changes.append(
            f"day-of-month {dom!r} and day-of-week {dow!r} now combine with {'OR' if new_or else 'AND'} "
            f"(OR only when neither starts with * or ?); they were combined with {'OR' if old_or else 'AND'}"
        )
    elif new_or and (re.search(r"w", dom) or re.search(r"[l#]", dow)):
        # croniter intersected a # or W day (and an L weekday) with the other field.
        changes.append(
            f"day-of-month {dom!r} or day-of-week {dow!r}: a day matching either now fires; a # or W "
            "day had to match the other field too"
        )
    return changes


_EVERY = {
    "second": range(60),
    "minute": range(60),
    "hour": range(24),
    "day-of-month": range(1, 32),
    "month": range(1, 13),
    "day-of-week": range(7),
}


def _old_values(expanded: Sequence[object], name: str, walked: bool) -> set[int]:
    """The values croniter's expansion allowed, as the old code used them: a bare `*` is every
    value; a `*` among numbers was every value to croniter's walk and dropped by the field search."""
    numbers = {v % 7 if name == "day-of-week" else v for v in expanded if isinstance(v, int)}
    if "*" in expanded and (walked or not numbers):
        return set(_EVERY[name])
    return numbers


def _listed(values: set[int]) -> str:
    return "every value" if len(values) > 40 else ",".join(str(v) for v in sorted(values)) or "nothing"


@dataclass(frozen=True, slots=True)
class Reviewed:
    """One stored schedule the review paused, and why."""

    schedule_id: str
    expression: str
    changes: tuple[str, ...]


def stored_changes(definition_text: str) -> tuple[str | None, list[str]]:
    """A stored definition's cron expression (None if it has none) and how it reads differently.

    Read from the raw JSON first, so a definition the current model refuses is still reviewed:
    then that is the change, and the row is paused rather than left to break every claim. (The
    tests hold the grammar to accept everything croniter accepted, so this is a safety net.)
    """
    spec = json.loads(definition_text).get("spec", {})
    expression = spec.get("expression") if isinstance(spec, dict) and spec.get("kind") == "cron" else None
    try:
        parse_definition(definition_text)
    except ValidationError as err:
        return expression, [f"the stored definition is no longer valid: {err.errors(include_url=False)}"]
    return expression, reading_changes(expression) if isinstance(expression, str) else []


def pause_reason(expression: str | None, changes: list[str]) -> str:
    """What the paused schedule's owner reads: what changed, and what to do."""
    subject = f"the cron expression {expression!r}" if expression else "its definition"
    reason = (
        f"paused when the ticker was upgraded: {subject} reads differently under the documented cron "
        f"rules ({'; '.join(changes)}). Check the expression, then resume the schedule, or update it "
        "to say what it should"
    )
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 1] + "…"


class CronReview:
    """Reviews stored schedules under older cron rules, a batch per transaction."""

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        queries: Queries,
        events: EventFactory,
        metrics: TickerMetrics,
        batch_size: int,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._q = queries
        self._events = events
        self._metrics = metrics
        self._batch_size = batch_size

    async def run(self) -> list[Reviewed]:
        """Review every row not yet reviewed (those other tickers hold are left to a later pass)."""
        paused: list[Reviewed] = []
        while True:
            batch, reviewed = await self._review_batch()
            paused.extend(batch)
            if reviewed < self._batch_size:
                return paused

    async def _review_batch(self) -> tuple[list[Reviewed], int]:
        async with self._pool.acquire() as conn, conn.transaction():
            records = await conn.fetch(self._q.unreviewed_schedules, self._batch_size)
            if not records:
                return [], 0
            now: datetime = await conn.fetchval(self._q.locked_now)
            staged: list[Outgoing] = []
            paused: list[Reviewed] = []
            for record in records:
                expression, changes = stored_changes(record["definition"])
                if not changes:
                    continue
                schedule_id: str = record["schedule_id"]
                reason = pause_reason(expression, changes)
                # Paused until someone resumes it: an automatic resume would fire the new reading.
                await conn.execute(self._q.pause, schedule_id, reason, None, now)
                staged.append(
                    self._events.schedule_event(
                        SchedulePaused(schedule_id=schedule_id, reason=reason, resume_at=None),
                        id=fit_id(schedule_id, f"/paused@cron-rules-{CRON_RULES}"),
                        key=schedule_id,
                        occurred_at=now,
                    )
                )
                paused.append(Reviewed(schedule_id, expression or "", tuple(changes)))
            await conn.execute(self._q.mark_reviewed, [r["schedule_id"] for r in records])
            await stage_all(conn, schema=self._schema, items=staged)
        for item in paused:
            log.warning(
                "ticker: paused schedule %s, its cron expression %r reads differently now: %s",
                item.schedule_id,
                item.expression,
                "; ".join(item.changes),
            )
        self._metrics.cron_rules_paused.inc(len(paused))
        return paused, len(records)
