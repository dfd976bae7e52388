"""Which handlers the live claimers serve (from their ClaimerAnnounced), and the warning a
schedule gets when no live claimer serves its handler."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.schemas import Handlers

router = APIRouter(tags=["handlers"])


@router.get("/v1/handlers", response_model=Handlers, summary="Handlers the live claimers serve")
async def list_handlers(
    s: Annotated[Services, Depends(services)],
    handler: Annotated[
        str | None,
        Query(
            max_length=200,
            description="check this handler: `warnings` says why it may never run, as a create would",
        ),
    ] = None,
) -> dict[str, Any]:
    claimers = await read_model.claimers(s.pool, s.schema)
    served: dict[str, list[str]] = {}
    for claimer in claimers:
        if claimer["live"]:
            for name in claimer["handlers"]:
                served.setdefault(name, []).append(claimer["claimer_id"])
    return {
        "handlers": [{"name": name, "claimers": ids} for name, ids in sorted(served.items())],
        "claimers": claimers,
        # The same words a create or update naming it answers with (one source for the CLI, the
        # API and the dashboard's forms).
        "warnings": _warnings(claimers, handler) if handler else [],
    }


async def handler_warnings(s: Services, handler: str) -> list[str]:
    """Why ``handler`` may never run: no live claimer announced it (empty when one serves it)."""
    return _warnings(await read_model.claimers(s.pool, s.schema), handler)


def _warnings(claimers: list[dict[str, Any]], handler: str) -> list[str]:
    live = [c for c in claimers if c["live"]]
    if any(handler in c["handlers"] for c in live):
        return []
    if not live:
        return [
            f"no live claimer has announced its handlers, so nothing will run {handler!r} yet "
            "(start a claimer with SLOTFLOW_CLAIMER_HANDLER_MODULES)"
        ]
    known = sorted({name for c in live for name in c["handlers"]})
    shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
    return [
        f"no live claimer serves handler {handler!r}: its runs would fail until one does "
        f"(the live claimers serve: {shown})"
    ]
