"""The preview: a schedule's next N firings with DST days marked, as lines a person reads.

The library call is `slotflow.core.cronslots.preview`; this adds the local times a DST `skip`
policy drops, so a preview across a spring-forward night says what will not fire and why.
"""

from dataclasses import dataclass
from datetime import datetime

from slotflow.contracts import DstPolicy, ScheduleSpec
from slotflow.contracts.schedules import CronSpec
from slotflow.core.cronslots import dst_skips_between, preview
from slotflow.core.identity import slot_label

_MARKS = {
    "repeated-first": "DST: first pass of a repeated local time",
    "repeated-second": "DST: second pass of a repeated local time",
    "shifted": "DST: local time does not exist, shifted to the next valid instant",
}


@dataclass(frozen=True, slots=True)
class PreviewLine:
    """One upcoming firing, or one local time the DST policy skips."""

    at: datetime
    local: str
    fires: bool
    note: str

    def render(self) -> str:
        verb = "fires  " if self.fires else "skipped"
        return f"{slot_label(self.at)}  {self.local:<32}  {verb}  {self.note}".rstrip()


def preview_lines(
    spec: ScheduleSpec, dst: DstPolicy, *, after: datetime, count: int, schedule_id: str | None = None
) -> list[PreviewLine]:
    """The next ``count`` firings after ``after``, with DST-skipped local times between them.

    ``schedule_id`` is the schedule an `H` in the cron draws its values from.
    """
    slots = preview(spec, dst, after=after, count=count, schedule_id=schedule_id)
    # The wall time each fires at; a shifted slot's note names the local time it stands for.
    lines = [
        PreviewLine(
            s.at,
            s.fires_local,
            True,
            f"{_MARKS['shifted']} (stands for {s.local})"
            if s.dst == "shifted"
            else _MARKS.get(s.dst or "", s.dst or ""),
        )
        for s in slots
    ]
    if slots and isinstance(spec, CronSpec) and dst.nonexistent == "skip":
        for skipped in dst_skips_between(spec, dst, after=after, until=slots[-1].at, schedule_id=schedule_id):
            detail = skipped.detail or "local time does not exist on this DST day"
            lines.append(PreviewLine(skipped.at, "", False, f"DST: {detail}"))
    lines.sort(key=lambda line: (line.at, not line.fires))
    return lines
