"""Liveness and readiness."""

import asyncio
import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import ServicesDep

router = APIRouter(tags=["ops"])


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
