"""Rows of the ticker's tables as typed values, and the parsed-definition cache (`rows.py` by the
persistence convention, docs/development.md)."""

from datetime import datetime
from functools import lru_cache
from typing import NamedTuple

import asyncpg
from pydantic import TypeAdapter

from slotflow.contracts import ScheduleDefinition
from slotflow.contracts.timers import TimerAction
from slotflow_ticker.planning import PauseWindow, Position, ScheduleState

_ACTION = TypeAdapter[TimerAction](TimerAction)


@lru_cache(maxsize=65_536)
def parse_definition(text: str) -> ScheduleDefinition:
    """A stored definition, parsed once per distinct JSON text (claims see the same rows often)."""
    return ScheduleDefinition.model_validate_json(text)


def parse_action(text: str) -> TimerAction:
    return _ACTION.validate_json(text)


def dump_action(action: TimerAction) -> str:
    return _ACTION.dump_json(action).decode()


class ScheduleRow(NamedTuple):
    """One row of `schedules` (a NamedTuple for the claim's sake, see planning.Firing)."""

    schedule_id: str
    definition: ScheduleDefinition
    version: int
    paused: bool
    pause_reason: str
    resume_at: datetime | None
    paused_at: datetime | None
    resumed_at: datetime | None
    next_slot: datetime | None
    next_fire_at: datetime | None
    covered_until: datetime
    deleted: bool
    #: The last resume asked to catch up on the paused slots (planning.PauseWindow).
    resume_catch_up: bool = False

    @classmethod
    def from_record(cls, record: "asyncpg.Record") -> "ScheduleRow":
        # Positional, in field order: the claim builds one per row.
        return cls(
            record["schedule_id"],
            parse_definition(record["definition"]),
            record["version"],
            record["paused"],
            record["pause_reason"],
            record["resume_at"],
            record["paused_at"],
            record["resumed_at"],
            record["next_slot"],
            record["next_fire_at"],
            record["covered_until"],
            record["deleted"],
            record["resume_catch_up"],
        )

    @property
    def position(self) -> Position:
        return Position(self.next_slot, self.next_fire_at, self.covered_until)

    def state(self) -> ScheduleState:
        pause = (
            NEVER_PAUSED
            if self.paused_at is None
            else PauseWindow(self.paused_at, self.resumed_at, self.pause_reason, self.resume_catch_up)
        )
        return ScheduleState(self.schedule_id, self.definition, self.position, pause)


NEVER_PAUSED = PauseWindow()
