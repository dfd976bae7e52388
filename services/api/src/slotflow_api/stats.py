"""Reading the stats processor's windows (schema `stats`, written by services/stats) for the api.

The processor stores one row per window, subject and source partition, with counters and
mergeable histograms (slotflow_base.stats.histogram). Here rows become series: parts are summed and
percentiles are read from the merged histograms, so a handler's p99 is the p99 of all its runs.
The processor keys each family itself: a schedule's runs by job id (`runs`), a workflow's activity
runs by workflow id (`workflows`), every run by the handler it ran (`handlers`), so a handler's
series counts the runs it ran (not the runs of jobs that name it today) and a workflow never shows
as a schedule. The statements are in `slotflow_api.sql.stats`.
"""

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql, sql_with
from slotflow_api.sql.stats import (
    HANDLER_WINDOWS,
    PLAIN_WINDOWS,
    RUN_WINDOWS,
    SLOTS_SKIPPED_WINDOWS,
    SUBJECT_FILTER,
)
from slotflow_base.stats import histogram
from slotflow_base.stats.counters import DLQ_COUNTERS, RUN_COUNTERS, SCHEDULE_COUNTERS

Size = Literal["1m", "1h"]
SIZE_SECONDS: dict[str, int] = {"1m": 60, "1h": 3600}
#: A handler-less job (its JobDue not seen yet) is shown under this name.
UNKNOWN_HANDLER = "(unknown)"
#: The worker's `handlers` subject for a run event that did not name its handler (written before
#: run events did): the prefix and the job id, resolved here to the job's newest JobDue's handler.
LEGACY_HANDLER_PREFIX = "~"
#: Most windows one request may span (a week of minutes).
MAX_WINDOWS = 7 * 24 * 60


def window_range(size: Size, since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    """[since, until) aligned to whole windows; defaults: the last 60 windows up to now."""
    seconds = SIZE_SECONDS[size]
    end = until or datetime.now(UTC)
    # Round `until` up so the window holding it is included.
    end_epoch = -(-end.timestamp() // seconds) * seconds
    start_epoch = (since.timestamp() // seconds) * seconds if since else end_epoch - 60 * seconds
    return datetime.fromtimestamp(start_epoch, UTC), datetime.fromtimestamp(end_epoch, UTC)


def _loads(value: Any) -> dict[str, int]:
    loaded = json.loads(value) if isinstance(value, str) else value
    return {str(k): int(v) for k, v in (loaded or {}).items()}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def summarise(
    counters: Iterable[str],
    counts: Mapping[str, int],
    duration: Mapping[str, int],
    lateness: Mapping[str, int],
) -> dict[str, Any]:
    """One window (or a total) as the api serves it."""
    out_counts = {name: int(counts.get(name, 0)) for name in counters}
    finished = out_counts.get("completed", 0) + out_counts.get("failed", 0)
    return {
        "counts": out_counts,
        "failure_rate": round(out_counts.get("failed", 0) / finished, 6) if finished else None,
        "duration_ms": {
            "count": histogram.count(duration),
            "p50": _ms(histogram.quantile(duration, 0.5)),
            "p95": _ms(histogram.quantile(duration, 0.95)),
            "p99": _ms(histogram.quantile(duration, 0.99)),
        },
        "lateness_ms": {
            "count": histogram.count(lateness),
            "p50": _ms(histogram.quantile(lateness, 0.5)),
            "p99": _ms(histogram.quantile(lateness, 0.99)),
        },
    }


class _Acc:
    """Counts and histograms being summed for one series' window (or its total)."""

    __slots__ = ("counts", "duration", "lateness")

    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.duration: dict[str, int] = {}
        self.lateness: dict[str, int] = {}

    def add(
        self, counts: Mapping[str, int], duration: Mapping[str, int], lateness: Mapping[str, int]
    ) -> None:
        for name, n in counts.items():
            self.counts[name] += n
        self.duration = histogram.merge((self.duration, duration))
        self.lateness = histogram.merge((self.lateness, lateness))


FAMILY_COUNTERS: dict[str, tuple[str, ...]] = {
    "runs": RUN_COUNTERS,
    "schedules": SCHEDULE_COUNTERS,
    "dlq": DLQ_COUNTERS,
}


#: The family of windows each kind of series reads.
_FAMILY_OF = {"schedule": "runs", "workflow": "workflows", "handler": "handlers", "topic": "dlq"}


async def series(
    pool: Pool,
    schema: str,
    *,
    by: Literal["schedule", "workflow", "handler", "topic"],
    size: Size,
    since: datetime,
    until: datetime,
    subject: str | None = None,
) -> list[dict[str, Any]]:
    """One series per schedule, workflow, handler or topic: its windows in [since, until), oldest
    first, and its total over them. Empty while the processor has written nothing."""
    family = _FAMILY_OF[by]
    seconds = SIZE_SECONDS[size]
    params: list[Any] = [seconds, family, since, until]
    subject_filter = ""
    if subject is not None and by != "handler":
        # A handler's runs may sit under legacy subjects too: filtered below, once resolved.
        params.append(subject)
        subject_filter = SUBJECT_FILTER
    windows_of = {"schedule": RUN_WINDOWS, "handler": HANDLER_WINDOWS}.get(by, PLAIN_WINDOWS)
    try:
        rows = await pool.fetch(sql_with(windows_of, schema, subject=subject_filter), *params)
    except asyncpg.UndefinedTableError:
        return []  # the processor has not started against this database yet
    # Slots skipped are a schedule's (no handler ran them): shown under the schedule, and under
    # the handler its job names.
    with_skips = by in ("schedule", "handler")
    skipped = await _slots_skipped(pool, schema, seconds, since, until) if with_skips else {}
    windows: dict[str, dict[datetime, _Acc]] = defaultdict(lambda: defaultdict(_Acc))
    handlers: dict[str, str] = {}
    for row in rows:
        name = row["subject"]
        if by == "handler" and name.startswith(LEGACY_HANDLER_PREFIX):
            name = row["handler"] or UNKNOWN_HANDLER
        if by == "handler" and subject is not None and name != subject:
            continue
        if by == "schedule":
            handlers[name] = row["handler"] or UNKNOWN_HANDLER
        windows[name][row["window_start"]].add(
            _loads(row["counts"]), _loads(row["duration"]), _loads(row["lateness"])
        )
    for (job, handler, start), n in skipped.items():
        name = job if by == "schedule" else (handler or UNKNOWN_HANDLER)
        if subject is not None and name != subject:
            continue
        if by == "schedule":
            handlers.setdefault(name, handler or UNKNOWN_HANDLER)
        windows[name][start].counts["slots_skipped"] += n
    counters = {
        "schedule": (*RUN_COUNTERS, *SCHEDULE_COUNTERS),
        "handler": (*RUN_COUNTERS, *SCHEDULE_COUNTERS),
        "workflow": RUN_COUNTERS,
        "topic": DLQ_COUNTERS,
    }[by]
    out = []
    for name in sorted(windows):
        total = _Acc()
        points = []
        for start in sorted(windows[name]):
            acc = windows[name][start]
            total.add(acc.counts, acc.duration, acc.lateness)
            points.append(
                {
                    "start": start,
                    "end": start + timedelta(seconds=seconds),
                    **summarise(counters, acc.counts, acc.duration, acc.lateness),
                }
            )
        item: dict[str, Any] = {
            "name": name,
            "windows": points,
            "total": summarise(counters, total.counts, total.duration, total.lateness),
        }
        if by == "schedule":
            item["handler"] = handlers.get(name, UNKNOWN_HANDLER)
        out.append(item)
    return out


async def _slots_skipped(
    pool: Pool, schema: str, seconds: int, since: datetime, until: datetime
) -> dict[tuple[str, str | None, datetime], int]:
    rows = await pool.fetch(
        sql(SLOTS_SKIPPED_WINDOWS, schema),
        seconds,
        since,
        until,
    )
    return {(r["subject"], r["handler"], r["window_start"]): int(r["n"] or 0) for r in rows}
