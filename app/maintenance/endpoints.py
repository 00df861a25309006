"""/maintenance: the overview of what needs an operator, and the cleanup."""

from typing import Annotated

from fastapi import APIRouter, Body, Depends

from app.api.deps import ServicesDep
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import require_admin, require_unscoped
from app.maintenance.schemas import CleanupBody, CleanupReport, MaintenanceReport

router = APIRouter(
    route_class=OrjsonRoute,
    prefix="/maintenance",
    tags=["maintenance"],
    responses=ERROR_RESPONSES,
    # Cleanup spans every tenant: an admin key limited to some may not run it.
    dependencies=[Depends(require_admin), Depends(require_unscoped)],
)


@router.get("", response_model=MaintenanceReport)
async def overview(services: ServicesDep) -> MaintenanceReport:
    """What the files and the rows disagree on, as of now: task directories without a row,
    directories set aside in .orphans/, tasks whose directory is missing (counts, and capped
    sorted lists)."""
    return await services.maintenance.overview()


@router.post("/cleanup", response_model=CleanupReport)
async def cleanup(
    services: ServicesDep, body: Annotated[CleanupBody | None, Body()] = None
) -> CleanupReport:
    """Remove completed and failed tasks finished more than `older_than_days` days ago (default
    CLEANUP_DAYS): row, jobs, idempotency keys and directory. `dry_run` only reports them."""
    body = body or CleanupBody()
    return await services.maintenance.cleanup(body.older_than_days, dry_run=body.dry_run)
