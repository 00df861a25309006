"""/jobs: background work and its outcome."""

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query

from app.api.deps import ServicesDep
from app.api.errors import ERROR_RESPONSES
from app.auth.dependencies import require_unscoped
from app.jobs.schemas import JobOut, JobPage, JobStatus

router = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    responses=ERROR_RESPONSES,
    dependencies=[Depends(require_unscoped)],
)


@router.get("/{job_id}", response_model=JobOut)
async def get_job(
    job_id: Annotated[int, Path(ge=1, le=2**63 - 1)], services: ServicesDep
) -> JobOut:
    """One job with its status, attempts, error and result."""
    return JobOut.model_validate(await services.jobs.get(job_id))


@router.get("", response_model=JobPage)
async def list_jobs(
    services: ServicesDep,
    task_uuid: UUID | None = None,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobPage:
    """Jobs, newest first."""
    jobs = await services.jobs.list(
        task_uuid=str(task_uuid) if task_uuid else None, status=status, limit=limit
    )
    return JobPage(jobs=[JobOut.model_validate(j) for j in jobs])
