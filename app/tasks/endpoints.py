"""/tasks: create, list, read, lifecycle, delete."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.auth.dependencies import PrincipalDep, require_admin
from app.db.base import UTCBound
from app.errors import ErrorCode, Forbidden
from app.lifecycle import TaskStatus
from app.tasks.creation import TaskCreation
from app.tasks.presenters import task_created, task_out
from app.tasks.repository import encode_cursor
from app.tasks.schemas import FailBody, TaskCreate, TaskCreated, TaskOut, TaskPage
from app.tasks.service import TaskService

TasksDep = Annotated[TaskService, service("tasks")]
TaskCreationDep = Annotated[TaskCreation, service("task_creation")]

router = APIRouter(
    route_class=OrjsonRoute, prefix="/tasks", tags=["tasks"], responses=ERROR_RESPONSES
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TaskCreated,
    responses={200: {"model": TaskCreated, "description": "Same uuid and body: already created"}},
)
async def create_task(
    body: TaskCreate, creation: TaskCreationDep, response: Response, principal: PrincipalDep
) -> TaskCreated:
    """Create a task (idempotent for the same uuid and body); a key limited to some tenants
    creates only theirs (403 out_of_scope)."""
    if not principal.allows(body.user, body.task_key.task_source):
        raise Forbidden(
            "this key may not create tasks for that user or task source",
            code=ErrorCode.OUT_OF_SCOPE,
        )
    view, created = await creation.create(body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return task_created(view)


@router.get("", response_model=TaskPage)
async def list_tasks(
    task_service: TasksDep,
    principal: PrincipalDep,
    status: TaskStatus | None = None,
    user: str | None = None,
    task_source: str | None = None,
    owner: str | None = None,
    repo: str | None = None,
    task_type: str | None = None,
    task_id: str | None = None,
    created_after: UTCBound | None = None,
    created_before: UTCBound | None = None,
    cursor: str | None = Query(None, description="next_cursor of the previous page"),
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TaskPage:
    """Tasks, newest first, filtered and paginated (only its tenants' for a scoped key)."""
    tasks = await task_service.list(
        scope=principal,
        filters={
            "status": status,
            "user": user,
            "task_source": task_source,
            "owner": owner,
            "repo": repo,
            "task_type": task_type,
            "task_id": task_id,
        },
        created_after=created_after,
        created_before=created_before,
        cursor=cursor,
        limit=limit,
    )
    views = [task_service.view(task) for task in tasks]
    next_cursor = encode_cursor(tasks[-1]) if len(tasks) == limit else None
    return TaskPage(tasks=[task_out(v) for v in views], next_cursor=next_cursor)


@router.get("/{uuid}", response_model=TaskOut)
async def get_task(uuid: TaskUUID, task_service: TasksDep) -> TaskOut:
    """The task with its statistics, context tokens, window and budget."""
    return task_out(await task_service.get(uuid))


@router.post("/{uuid}/stop", response_model=TaskOut)
async def stop_task(uuid: TaskUUID, task_service: TasksDep) -> TaskOut:
    """running → paused."""
    return task_out(await task_service.transition(uuid, "stop"))


@router.post("/{uuid}/resume", response_model=TaskOut)
async def resume_task(uuid: TaskUUID, task_service: TasksDep) -> TaskOut:
    """paused → running."""
    return task_out(await task_service.transition(uuid, "resume"))


@router.post("/{uuid}/complete", response_model=TaskOut)
async def complete_task(uuid: TaskUUID, task_service: TasksDep) -> TaskOut:
    """running|paused → completed; the directory moves to completed/."""
    return task_out(await task_service.transition(uuid, "complete"))


@router.post("/{uuid}/fail", response_model=TaskOut)
async def fail_task(uuid: TaskUUID, body: FailBody, task_service: TasksDep) -> TaskOut:
    """running|paused → failed, with the error; the directory moves to completed/."""
    return task_out(await task_service.transition(uuid, "fail", error_message=body.error_message))


@router.delete(
    "/{uuid}", status_code=status.HTTP_204_NO_CONTENT, dependencies=[Depends(require_admin)]
)
async def delete_task(uuid: TaskUUID, task_service: TasksDep) -> Response:
    """Remove the task's row and its directory."""
    await task_service.delete(uuid)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
