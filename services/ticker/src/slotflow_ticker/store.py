"""Rows of the ticker's tables as typed values, and the parsed-definition cache."""

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

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


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One row of `schedules`."""

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

    @classmethod
    def from_record(cls, record: "asyncpg.Record") -> "ScheduleRow":
        return cls(
            schedule_id=record["schedule_id"],
            definition=parse_definition(record["definition"]),
            version=record["version"],
            paused=record["paused"],
            pause_reason=record["pause_reason"],
            resume_at=record["resume_at"],
            paused_at=record["paused_at"],
            resumed_at=record["resumed_at"],
            next_slot=record["next_slot"],
            next_fire_at=record["next_fire_at"],
            covered_until=record["covered_until"],
            deleted=record["deleted"],
        )

    @property
    def position(self) -> Position:
        return Position(self.next_slot, self.next_fire_at, self.covered_until)

    def state(self) -> ScheduleState:
        pause = (
            NEVER_PAUSED
            if self.paused_at is None
            else PauseWindow(self.paused_at, self.resumed_at, self.pause_reason)
        )
        return ScheduleState(
            schedule_id=self.schedule_id, definition=self.definition, position=self.position, pause=pause
        )


NEVER_PAUSED = PauseWindow()
