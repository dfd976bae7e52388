"""Runs: one row per slot with every attempt, fence token, owner, timings and outcome."""

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query

from slotflow.core.identity import run_id
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.errors import NotFound
from slotflow_api.routes.common import Cursor, Limit
from slotflow_api.schemas import Page, Run, RunDetail

router = APIRouter(tags=["runs"])

RUN_STATES = ("due", "running", "failed", "retrying", "held", "completed", "dead_lettered", "skipped")
#: A state filter names a state a run can be in: `state=bogus` is a 422 saying which exist, not an
#: empty list that reads as "no runs".
RunState = Literal["due", "running", "failed", "retrying", "held", "completed", "dead_lettered", "skipped"]


@router.get("/v1/runs", response_model=Page[Run], summary="List runs, newest slot first")
async def list_runs(
    s: Annotated[Services, Depends(services)],
    job_id: Annotated[str | None, Query(max_length=400)] = None,
    state: Annotated[RunState | None, Query(description=" | ".join(RUN_STATES))] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    return await read_model.list_runs(
        s.pool,
        s.schema,
        job_id=job_id,
        state=state,
        start=None,
        end=None,
        ascending=False,
        limit=limit,
        cursor=cursor,
    )


@router.get(
    "/v1/runs/{run_id:path}",
    response_model=RunDetail,
    summary="One run with its payload, result and every attempt's error, traceback and log lines "
    "(URL-encode the run id: it holds '@' and ':')",
    responses={404: {"description": "no such run"}},
)
async def get_run(
    s: Annotated[Services, Depends(services)],
    run_id: Annotated[str, Path(min_length=1, max_length=1000)],
) -> dict[str, object]:
    row = await read_model.get_run(s.pool, s.schema, run_id)
    if row is None:
        raise NotFound(f"run {run_id!r} is not known (yet){_spelling_hint(run_id)}")
    return row


def _spelling_hint(given: str) -> str:
    """A run id names its slot in UTC with a `Z` (`payouts@2026-03-01T02:00:00Z`); one written
    with another spelling of the same instant (`+00:00`, `+01:00`) names no run: say which does."""
    job, at, slot_text = given.rpartition("@")
    if not at or not job:
        return ""
    try:
        slot = datetime.fromisoformat(slot_text)
    except ValueError:
        return ""
    if slot.tzinfo is None:
        return "; a run id names its slot in UTC with a Z, e.g. " + repr(f"{job}@{slot_text}Z")
    canonical = run_id(job, slot)
    return (
        f"; run ids name their slot in UTC with a Z: did you mean {canonical!r}?"
        if canonical != given
        else ""
    )
