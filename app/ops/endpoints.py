"""The index, liveness, readiness and Prometheus metrics."""

import asyncio
import os
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, get_args

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from sqlalchemy import URL, text

from app.api.deps import service
from app.api.errors import ERROR_RESPONSES, ERROR_SCHEMA
from app.api.routing import OrjsonRoute
from app.auth.dependencies import BEARER, require_unscoped
from app.config import Settings
from app.context.store import ContextStore
from app.db.engine import Database
from app.jobs.queue import ACTIVE, count_active
from app.jobs.runner import JobRunner
from app.lifecycle import TaskStatus
from app.observability.metrics import CONTENT_TYPE, JobCounts, Metrics, TaskCounts
from app.ops.schemas import ServiceIndex
from app.tasks.repository import count_by_status

DbDep = Annotated[Database, service("db")]
MetricsDep = Annotated[Metrics, service("metrics")]
RunnerDep = Annotated[JobRunner, service("runner")]
SettingsDep = Annotated[Settings, service("settings")]
StoreDep = Annotated[ContextStore, service("store")]

router = APIRouter(route_class=OrjsonRoute, tags=["ops"])

VERSION = version("context-service")
SUMMARY = "Durable, compacted LLM conversation context for coding agents."
DOCS_URL, REDOC_URL, OPENAPI_URL = "/docs", "/redoc", "/openapi.json"


@router.get("/", response_model=ServiceIndex)
async def index(settings: SettingsDep) -> ServiceIndex:
    """What this service is and where its documentation is (no key needed)."""
    public = settings.auth.docs_public
    return ServiceIndex(
        service="context-service",
        version=VERSION,
        summary=SUMMARY,
        docs=DOCS_URL if public else None,
        redoc=REDOC_URL if public else None,
        openapi=OPENAPI_URL if public else None,
        health="/healthz",
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz", responses={503: {"description": "The database or the store cannot take a write"}}
)
async def readyz(db: DbDep, settings: SettingsDep, store: StoreDep) -> JSONResponse:
    """The database answers, and the store can take a write: CONTEXT_DIR (and the directory of
    a SQLite database elsewhere) is writable and has READY_MIN_FREE_BYTES free. Each check says
    what is wrong when it fails."""
    checks: dict[str, str] = {}
    try:
        async with db.reader() as session:
            await session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    floor = settings.storage.ready_min_free_bytes
    root = store.layout.root
    checks["context_dir"] = await asyncio.to_thread(_writable_with_room, root, floor)
    database_dir = _sqlite_directory(db.engine.url)
    if database_dir is not None and database_dir != root:
        checks["database_dir"] = await asyncio.to_thread(_writable_with_room, database_dir, floor)
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks}, 200 if ready else 503
    )


def _writable_with_room(directory: Path, floor: int) -> str:
    """ "ok", or why a write to ``directory`` would fail now (no path: the answer is public)."""
    if not os.access(directory, os.W_OK):
        return "error: not writable"
    disk = os.statvfs(directory)
    free = disk.f_bavail * disk.f_frsize
    if free < floor:
        return f"error: {free} bytes free, fewer than the {floor} required"
    return "ok"


def _sqlite_directory(url: URL) -> Path | None:
    """The directory of a SQLite database file (None for another database or one in memory)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).resolve().parent


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
    dependencies=[Depends(BEARER), Depends(require_unscoped)],
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
async def metrics(db: DbDep, app_metrics: MetricsDep, runner: RunnerDep) -> PrometheusResponse:
    """Prometheus metrics: request latency by route, tasks by status, job queue depth, appended
    messages, compactions and their duration, chat backend latency and errors. Counters are
    this process's (with several workers, the one that answers the scrape)."""
    async with db.reader() as session, session.begin():  # one snapshot for both
        tasks = TaskCounts(await count_by_status(session), get_args(TaskStatus))
        active = JobCounts(await count_active(session), runner.handlers, ACTIVE)
    app_metrics.set_counts(tasks, active)
    return PrometheusResponse(app_metrics.render())
