"""Liveness, readiness (Kafka and PostgreSQL answer) and Prometheus metrics."""

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from slotflow.kafka.admin import describe_cluster
from slotflow.logs import redact
from slotflow_api.app_state import Services, services
from slotflow_api.schemas import Health, Readiness
from slotflow_api.sql.read_model import READINESS_PROBE

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Kafka and PostgreSQL both answer, and every loop of the process runs",
    responses={503: {"model": Readiness, "description": "which dependency failed, or which loop crashed"}},
)
async def readyz(s: Annotated[Services, Depends(services)]) -> JSONResponse:
    timeout = s.settings.api.readiness_timeout_seconds
    kafka, postgres = await asyncio.gather(_kafka(s, timeout), _postgres(s, timeout))
    # A crashed projector leaves the read model frozen: the answers would be stale, so not ready.
    loops = "ok" if s.crashed is None else redact(f"error: {s.crashed}")[:500]
    body = Readiness(kafka=kafka, postgres=postgres, loops=loops)
    status = 200 if kafka == "ok" and postgres == "ok" and loops == "ok" else 503
    return JSONResponse(status_code=status, content=body.model_dump())


async def _kafka(s: Services, timeout: float) -> str:
    try:
        await asyncio.wait_for(
            describe_cluster(
                s.settings.kafka.bootstrap,
                request_timeout_ms=int(timeout * 1000),
                security=s.settings.kafka.security,
            ),
            timeout=timeout + 0.5,
        )
    except Exception as err:  # noqa: BLE001 - readiness reports any failure as text
        return redact(f"error: {type(err).__name__}: {err}")[:500]
    return "ok"


async def _postgres(s: Services, timeout: float) -> str:
    try:
        await asyncio.wait_for(s.pool.fetchval(READINESS_PROBE), timeout=timeout)
    except Exception as err:  # noqa: BLE001 - readiness reports any failure as text
        return redact(f"error: {type(err).__name__}: {err}")[:500]
    return "ok"


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(s: Annotated[Services, Depends(services)]) -> Response:
    return Response(generate_latest(s.metrics.registry), media_type=CONTENT_TYPE_LATEST)
