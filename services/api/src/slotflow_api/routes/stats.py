"""Windowed run statistics from the stats processor (services/stats, faust-streaming).

Counts per tumbling one-minute or one-hour window, per schedule, per handler and, for parked
poison messages, per original topic; duration and firing-lateness percentiles read from mergeable
histograms (about 1 % relative error). The processor copies its tables to PostgreSQL about a
second behind the topics; these endpoints read that copy.
"""

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from slotflow_api import stats
from slotflow_api.app_state import Services, services
from slotflow_api.errors import BadRequest
from slotflow_base.stats.settings import StatsSchemaSettings

router = APIRouter(tags=["stats"])

_SCHEMA = StatsSchemaSettings().db_schema


class Durations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(description="completed runs measured")
    p50: float | None = Field(description="milliseconds; null without completed runs")
    p95: float | None
    p99: float | None


class Lateness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(description="JobDue records measured")
    p50: float | None = Field(
        description="milliseconds from fire time (slot plus jitter) to the JobDue's produce time"
    )
    p99: float | None


class Figures(BaseModel):
    counts: dict[str, int] = Field(
        description="runs: due, started, completed, failed, retried, dead_lettered, skipped (overlap), "
        "slots_skipped (SlotSkipped); topics: parked"
    )
    failure_rate: float | None = Field(description="failed / (completed + failed); null when neither")
    duration_ms: Durations
    lateness_ms: Lateness


class Window(Figures):
    start: datetime
    end: datetime


class Series(BaseModel):
    name: str = Field(description="schedule id, workflow id, handler name or original topic")
    handler: str | None = Field(default=None, description="the schedule's handler (schedule series only)")
    windows: list[Window] = Field(description="windows with at least one event, oldest first")
    total: Figures = Field(description="the windows merged (percentiles of all of them together)")


class StatsPage(BaseModel):
    size: stats.Size
    since: datetime
    until: datetime
    series: list[Series]


SizeQuery = Annotated[stats.Size, Query(description="window size: tumbling 1m or 1h")]
Since = Annotated[datetime | None, Query(description="start (ISO-8601 with offset); default 60 windows back")]
Until = Annotated[datetime | None, Query(description="end (ISO-8601 with offset); default now")]


def _range(size: stats.Size, since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise BadRequest(f"{name} needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    start, end = stats.window_range(size, since, until)
    if end <= start:
        raise BadRequest("since must be before until")
    if (end - start).total_seconds() / stats.SIZE_SECONDS[size] > stats.MAX_WINDOWS:
        raise BadRequest(
            f"at most {stats.MAX_WINDOWS} windows per request; narrow since/until or use size=1h"
        )
    return start, end


async def _page(
    s: Services, by: Any, size: stats.Size, since: datetime | None, until: datetime | None, name: str | None
) -> dict[str, Any]:
    start, end = _range(size, since, until)
    found = await stats.series(s.pool, _SCHEMA, by=by, size=size, since=start, until=end, subject=name)
    return {"size": size, "since": start, "until": end, "series": found}


@router.get("/v1/stats/schedules", response_model=StatsPage, summary="Run statistics per schedule and window")
async def per_schedule(
    s: Annotated[Services, Depends(services)],
    size: SizeQuery = "1m",
    since: Since = None,
    until: Until = None,
    schedule_id: Annotated[str | None, Query(max_length=400, description="only this schedule")] = None,
) -> dict[str, Any]:
    return await _page(s, "schedule", size, since, until, schedule_id)


@router.get(
    "/v1/stats/workflows",
    response_model=StatsPage,
    summary="Activity run statistics per workflow and window (apart from schedules)",
)
async def per_workflow(
    s: Annotated[Services, Depends(services)],
    size: SizeQuery = "1m",
    since: Since = None,
    until: Until = None,
    workflow_id: Annotated[str | None, Query(max_length=400, description="only this workflow")] = None,
) -> dict[str, Any]:
    return await _page(s, "workflow", size, since, until, workflow_id)


@router.get(
    "/v1/stats/handlers",
    response_model=StatsPage,
    summary="Run statistics per handler and window: each run under the handler it ran",
)
async def per_handler(
    s: Annotated[Services, Depends(services)],
    size: SizeQuery = "1m",
    since: Since = None,
    until: Until = None,
    handler: Annotated[str | None, Query(max_length=200, description="only this handler")] = None,
) -> dict[str, Any]:
    return await _page(s, "handler", size, since, until, handler)


@router.get(
    "/v1/stats/topics",
    response_model=StatsPage,
    summary="Poison messages parked per original topic and window",
)
async def per_topic(
    s: Annotated[Services, Depends(services)],
    size: SizeQuery = "1m",
    since: Since = None,
    until: Until = None,
    topic: Annotated[str | None, Query(max_length=300, description="only this original topic")] = None,
) -> dict[str, Any]:
    return await _page(s, "topic", size, since, until, topic)
