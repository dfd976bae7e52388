"""GET /v1/audit: expected slots of a schedule against what was recorded."""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import AwareDatetime

from slotflow.contracts import ScheduleDefinition
from slotflow.contracts.envelope import SCHEDULE_ID_PATTERN
from slotflow_api import audit as auditing
from slotflow_api import read_model, retention
from slotflow_api.app_state import Services, services
from slotflow_api.errors import BadRequest, NotFound
from slotflow_api.schemas import Audit

router = APIRouter(tags=["audit"])

DEFAULT_WINDOW = timedelta(days=1)


@router.get(
    "/v1/audit",
    response_model=Audit,
    response_model_by_alias=True,
    summary="Slots the schedule should have fired in [from, to) against what was recorded",
    responses={404: {"description": "no such schedule"}, 422: {"description": "bad range"}},
)
async def audit(
    s: Annotated[Services, Depends(services)],
    schedule: Annotated[str, Query(pattern=SCHEDULE_ID_PATTERN, description="the schedule id")],
    start: Annotated[
        AwareDatetime | None, Query(alias="from", description="default: `to` minus one day")
    ] = None,
    end: Annotated[
        AwareDatetime | None, Query(alias="to", description="default: now (database clock)")
    ] = None,
) -> Audit:
    now = await read_model.database_now(s.pool)
    end = end or now
    start = start or end - DEFAULT_WINDOW
    if end <= start:
        raise BadRequest("`to` must be after `from`")
    judged = await judge(s, schedule, start, end, now=now)
    report, judged_from, purged = judged.report, judged.judged_from, judged.purged
    changes = await read_model.schedule_changes(s.pool, s.schema, schedule, start, end)
    threshold = s.settings.api.late_threshold
    return Audit.model_validate(
        {
            "schedule_id": schedule,
            "from": start,
            "to": end,
            "expected": len(report.slots),
            "pending": report.pending,
            "as_of": now,
            "late_threshold_seconds": threshold.total_seconds(),
            "slots": [
                {
                    "slot": v.slot,
                    "run_id": v.run_id,
                    "status": v.status,
                    "detail": v.detail,
                    "kind": v.kind,
                    "run_state": v.run_state,
                    "outcome": v.outcome,
                    "repairs": [
                        {
                            "at": r.at,
                            "action": r.action,
                            "by": r.principal,
                            "reason": r.reason,
                            "run_id": r.run_id,
                            "run_state": r.run_state,
                            "said": r.describe(),
                        }
                        for r in v.repairs
                    ],
                }
                for v in report.slots
            ],
            "outcomes": report.outcomes(),
            "dead_lettered": [
                {"slot": r.slot, "run_id": r.run_id, "kind": r.kind, "state": r.state}
                for r in report.dead_lettered
            ],
            "audited_from": max(report.created_at or judged_from, judged_from),
            "note": _note(report.created_at, judged_from if purged else None, s.settings.api.retention_days),
            "summary": report.summary(),
            "unscheduled": [
                {"slot": r.slot, "run_id": r.run_id, "kind": r.kind, "state": r.state}
                for r in report.unscheduled
            ],
            "changes": changes,
        }
    )


@dataclass(frozen=True)
class Judged:
    """An audit of one schedule's window, and where it vouches from."""

    report: auditing.AuditReport
    judged_from: datetime
    #: Runs before `judged_from` were purged (the retention horizon is past `from`).
    purged: bool


async def judge(s: Services, schedule: str, start: datetime, end: datetime, *, now: datetime) -> Judged:
    """Judge every slot of ``schedule`` in [start, end) against the read model (the slot audit),
    with the operators' repairs of each; the repair routes choose their slots from it too.

    Raises:
        NotFound: the read model knows no such schedule.
        AuditRangeTooLarge: the window holds more slots than one request may judge.
    """
    # Runs before the retention horizon were purged: a slot there cannot be told missed from
    # purged, so none is judged, and the answer says from when it vouches (audited_from, note).
    horizon = await retention.horizon(s.pool, s.schema)
    purged = horizon is not None and horizon > start
    judged_from = min(horizon, end) if horizon is not None and purged else start
    timeline_rows, run_rows, skip_rows = await read_model.audit_inputs(
        s.pool, s.schema, schedule, judged_from, end
    )
    if not timeline_rows:
        raise NotFound(f"schedule {schedule!r} is not known (yet)")
    timeline = [
        auditing.TimelineEntry(
            at=r["at"],
            change=r["change"],
            definition=ScheduleDefinition.model_validate(json.loads(r["definition"]))
            if r["definition"] is not None
            else None,
        )
        for r in timeline_rows
    ]
    runs = [
        auditing.RecordedRun(
            run_id=r["run_id"],
            slot=r["slot"],
            kind=r["kind"],
            state=r["state"],
            produced_at=r["produced_at"],
            fire_at=r["fire_at"],
            completions=r["completions"],
            fence_tokens=tuple(r["tokens"]),
            was_held=r["was_held"],
            held_reason=r["held_reason"],
            finished_at=r["finished_at"],
        )
        for r in run_rows
    ]
    skips = [auditing.RecordedSkip(r["slot"], r["run_id"], r["reason"], r["detail"]) for r in skip_rows]
    repairs = [
        auditing.RecordedRepair(
            slot=r["slot"],
            at=r["at"],
            action=r["action"],
            principal=r["principal"],
            reason=r["reason"],
            run_id=r["run_id"],
        )
        for r in await read_model.slot_repairs(s.pool, s.schema, schedule, judged_from, end)
    ]
    report = auditing.audit(
        timeline,
        runs,
        skips,
        schedule_id=schedule,
        start=judged_from,
        end=end,
        now=now,
        late_threshold=s.settings.api.late_threshold,
        limit=s.settings.api.audit_max_slots,
        repairs=repairs,
    )
    return Judged(report, judged_from, purged)


def _note(created_at: datetime | None, horizon: datetime | None, retention_days: float) -> str | None:
    notes = []
    if horizon is not None:
        notes.append(
            f"runs that ended before {horizon.isoformat()} were purged (SLOTFLOW_API_RETENTION_DAYS="
            f"{retention_days:g}): audited from then, the oldest instant the read model vouches for"
        )
    if created_at is not None and (horizon is None or created_at > horizon):
        notes.append(
            f"the schedule was created at {created_at.isoformat()}, after `from`: "
            "audited from its creation (backfilled slots before it are listed too)"
        )
    return "; ".join(notes) or None
