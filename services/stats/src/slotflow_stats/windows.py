"""One window's statistics as a JSON-ready value, and how an observation updates it exactly once.

faust's at-least-once guarantee flushes the changelog before it commits the source offsets
(`Consumer._commit_offsets`), so after a SIGKILL the changelog can hold the effect of events whose
offsets were never committed; those events are delivered again. Counting them again would double
them. Each window value therefore carries, per source topic, the offset of the last record it
applied, written in the same changelog record as the counts (one value, one write): a redelivered
record at or below that offset is recognised and skipped. That is exact because a window key
includes the source partition (`Key`), so one value only ever sees one partition of each topic,
in offset order (the agent's concurrency is one: faust issue #606).
"""

from typing import Any, NamedTuple

from slotflow_base.stats import histogram
from slotflow_stats.observe import Observation

#: Window sizes, seconds: tumbling one-minute and one-hour windows.
MINUTE = 60
HOUR = 3600
SIZES = (MINUTE, HOUR)

Value = dict[str, Any]


class Key(NamedTuple):
    """A table key: the subject and the source partition it arrived on.

    faust writes a table change to the changelog partition of the event being processed, and
    restores changelog partition p into the table of partition p. A key reached from two source
    partitions (a producer with another partitioner, or the dlq family, keyed by dead letter id
    but counted per original topic) would live in two changelog partitions and one would win on
    recovery; with the partition in the key every key lives in exactly one.
    """

    subject: str
    partition: int


def window_start(at: float, size: int) -> float:
    """Start (epoch seconds) of the tumbling window of ``size`` seconds holding ``at``."""
    return at - at % size


def empty() -> Value:
    return {"n": 0, "counts": {}, "duration": {}, "lateness": {}, "offsets": {}, "handler": None}


def apply(current: Value | None, observation: Observation, *, topic: str, offset: int) -> Value | None:
    """``current`` with ``observation`` (from ``topic`` at ``offset``) counted, or None when that
    record was applied to this value before (a redelivery after a crash)."""
    value = current or empty()
    applied = value["offsets"].get(topic)
    if applied is not None and offset <= int(applied):
        return None
    counts = dict(value["counts"])
    counts[observation.counter] = int(counts.get(observation.counter, 0)) + 1
    out: Value = {
        "n": int(value["n"]) + 1,
        "counts": counts,
        "duration": value["duration"],
        "lateness": value["lateness"],
        "offsets": {**value["offsets"], topic: offset},
        "handler": observation.handler or value.get("handler"),
    }
    if observation.duration is not None:
        out["duration"] = histogram.add(value["duration"], observation.duration)
    if observation.lateness is not None:
        out["lateness"] = histogram.add(value["lateness"], observation.lateness)
    return out
