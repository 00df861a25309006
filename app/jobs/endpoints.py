"""/jobs: background work and its outcome."""

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Query

from app.api.deps import service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import PrincipalDep, require_unscoped
from app.auth.visibility import require_visible
from app.db.engine import Database
from app.errors import ErrorCode, NotFound, TaskNotFound
from app.jobs.queue import JobQueue
from app.jobs.schemas import JobOut, JobPage, JobStatus

JobsDep = Annotated[JobQueue, service("jobs")]
DatabaseDep = Annotated[Database, service("db")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/jobs", tags=["jobs"], responses=ERROR_RESPONSES
)


@router.get("/{job_id}", response_model=JobOut)
async def get_job(
    job_id: Annotated[int, Path(ge=1, le=2**31 - 1)],  # the column's range
    job_queue: JobsDep,
    db: DatabaseDep,
    principal: PrincipalDep,
) -> JobOut:
    """One job with its status, attempts, error and result (a key limited to some tenants:
    only their tasks' jobs)."""
    job = await job_queue.get(job_id)
    if principal.scoped:
        try:
            await require_visible(db, job.task_uuid, principal)
        except TaskNotFound:
            raise NotFound(f"job {job_id} does not exist", code=ErrorCode.JOB_NOT_FOUND) from None
    return JobOut.model_validate(job)


@router.get("", response_model=JobPage)
async def list_jobs(
    job_queue: JobsDep,
    db: DatabaseDep,
    principal: PrincipalDep,
    task_uuid: UUID | None = None,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobPage:
    """Jobs, newest first. A key limited to some tenants lists one task's at a time (its
    own tasks' only)."""
    task = str(task_uuid) if task_uuid else None
    if principal.scoped:
        if task is None:
            await require_unscoped(principal)
        else:
            await require_visible(db, task, principal)
    jobs = await job_queue.list(task_uuid=task, status=status, limit=limit)
    return JobPage(jobs=[JobOut.model_validate(j) for j in jobs])
