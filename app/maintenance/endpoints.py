"""/maintenance: the overview of what needs an operator, and the cleanup."""

from typing import Annotated

from fastapi import APIRouter, Body, Depends

from app.api.deps import service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import require_admin, require_unscoped
from app.maintenance.schemas import CleanupBody, CleanupReport, MaintenanceReport
from app.maintenance.service import MaintenanceService

MaintenanceDep = Annotated[MaintenanceService, service("maintenance")]

router = APIRouter(
    route_class=OrjsonRoute,
    prefix="/maintenance",
    tags=["maintenance"],
    responses=ERROR_RESPONSES,
    # Cleanup spans every tenant: an admin key limited to some may not run it.
    dependencies=[Depends(require_admin), Depends(require_unscoped)],
)


@router.get("", response_model=MaintenanceReport)
async def overview(maintenance: MaintenanceDep) -> MaintenanceReport:
    """What the files and the rows disagree on, as of now: task directories without a row,
    directories set aside in .orphans/, tasks whose directory is missing (counts, and capped
    sorted lists)."""
    return await maintenance.overview()


@router.post("/cleanup", response_model=CleanupReport)
async def cleanup(
    maintenance: MaintenanceDep, body: Annotated[CleanupBody | None, Body()] = None
) -> CleanupReport:
    """Remove completed and failed tasks finished more than `older_than_days` days ago (default
    CLEANUP_DAYS): row, jobs, idempotency keys and directory. `dry_run` only reports them."""
    body = body or CleanupBody()
    return await maintenance.cleanup(body.older_than_days, dry_run=body.dry_run)
