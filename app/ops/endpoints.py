"""Liveness, readiness and Prometheus metrics."""

import asyncio
import os

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from app.api.deps import ServicesDep
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import require_unscoped
from app.observability.metrics import CONTENT_TYPE

ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorResponse"}

router = APIRouter(route_class=OrjsonRoute, tags=["ops"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Database or CONTEXT_DIR unusable"}})
async def readyz(services: ServicesDep) -> JSONResponse:
    """The database answers and CONTEXT_DIR is writable."""
    checks: dict[str, str] = {}
    try:
        async with services.db.reader() as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    root = services.store.layout.root
    writable = await asyncio.to_thread(os.access, root, os.W_OK)
    checks["context_dir"] = "ok" if writable else "error: not writable"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks}, 200 if ready else 503
    )


class PrometheusResponse(Response):
    media_type = CONTENT_TYPE


_METRICS_EXAMPLE = """\
# HELP context_tasks Tasks by status.
# TYPE context_tasks gauge
context_tasks{status="running"} 3.0
context_tasks{status="completed"} 12.0
# HELP context_messages_appended_total Messages committed by appends.
# TYPE context_messages_appended_total counter
context_messages_appended_total 418.0
"""


@router.get(
    "/metrics",
    dependencies=[Depends(require_unscoped)],
    response_class=PrometheusResponse,
    responses={
        200: {
            "description": "Prometheus text format (version 0.0.4)",
            "content": {CONTENT_TYPE: {"schema": {"type": "string"}, "example": _METRICS_EXAMPLE}},
        },
        # In the error shape, as JSON (not the route's Prometheus text).
        **{
            status: {
                "description": ERROR_RESPONSES[status]["description"],
                "content": {"application/json": {"schema": ERROR_SCHEMA}},
            }
            for status in (401, 403)
        },
    },
)
async def metrics(services: ServicesDep) -> PrometheusResponse:
    """Prometheus metrics: request latency by route, tasks by status, job queue depth, appended
    messages, compactions and their duration, chat backend latency and errors. Counters are
    this process's (with several workers, the one that answers the scrape)."""
    await services.metrics.refresh(services.db, services.runner.handlers)
    return PrometheusResponse(services.metrics.render())
