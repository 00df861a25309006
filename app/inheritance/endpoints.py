"""/inheritance/candidates and /tasks/{uuid}/inheritance (docs/decisions.md, Inheritance)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import require_unscoped
from app.inheritance.presenters import inheritance_out
from app.inheritance.schemas import Candidate, CandidatePage, InheritanceOut
from app.inheritance.service import InheritanceService
from app.task_key import TaskKey

InheritanceDep = Annotated[InheritanceService, service("inheritance")]

router = APIRouter(route_class=OrjsonRoute, tags=["lifecycle"], responses=ERROR_RESPONSES)


@router.get(
    "/inheritance/candidates",
    response_model=CandidatePage,
    dependencies=[Depends(require_unscoped)],
)
async def inheritance_candidates(
    inheritance: InheritanceDep,
    task_source: str,
    owner: str,
    repo: str,
    task_type: str,
    task_id: str,
    user: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> CandidatePage:
    """The finished runs a new task with this key and user would inherit from, newest first
    (the first one is chosen)."""
    try:
        key = TaskKey(
            task_source=task_source, owner=owner, repo=repo, task_type=task_type, task_id=task_id
        )
    except ValidationError as exc:  # the parts' limits are TaskKey's: a 422 like any other
        raise RequestValidationError(exc.errors(include_url=False), body=None) from None
    return CandidatePage(
        candidates=[
            Candidate(
                uuid=task.uuid,
                status=task.status,
                completed_at=task.completed_at,
                error_message=task.error_message,
                final_summary_ready=has_summary,
            )
            for task, has_summary in await inheritance.candidates_ready(key, user, limit)
        ]
    )


@router.get("/tasks/{uuid}/inheritance", response_model=InheritanceOut)
async def task_inheritance(uuid: TaskUUID, inheritance: InheritanceDep) -> InheritanceOut:
    """What the task inherited at creation, with the notification comment (nulls if nothing)."""
    return inheritance_out(await inheritance.task(uuid))
