"""Request dependencies: the services an endpoint uses, and the task it names.

The running app's services are in ``request.state.services`` (built at startup); an endpoint
asks for the ones it uses by name, e.g. ``Annotated[TaskService, service("tasks")]``.
"""

from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, Path, Query, Request

from app.auth.dependencies import principal_of
from app.auth.visibility import require_visible


def service(name: str) -> Any:
    """A dependency giving the app's service ``name``. (Dependencies here are coroutines even
    when they await nothing: FastAPI runs a plain function in a worker thread, a hand-off that
    cost a request ~0.1 ms of latency each.)"""

    async def get(request: Request) -> Any:
        return getattr(request.state.services, name)

    get.__name__ = f"get_{name}"
    return Depends(get)


async def task_uuid(
    uuid: Annotated[UUID, Path(description="The task's uuid.")], request: Request
) -> str:
    """The task's uuid, for a task the caller may see (another tenant's is 404 to a scoped key:
    not even its existence shows)."""
    return await visible(request, str(uuid))


async def visible(request: Request, task_uuid: str) -> str:
    """``task_uuid``, once the caller may see that task (TaskNotFound otherwise)."""
    await require_visible(request.state.services.db, task_uuid, principal_of(request))
    return task_uuid


TaskUUID = Annotated[str, Depends(task_uuid)]
MAX_THREAD_ID = 2**31 - 1  # the column's range
ThreadID = Annotated[
    int,
    Query(
        ge=0,
        le=MAX_THREAD_ID,
        description="The context: 0 is the task's root, any other number a thread of the task.",
    ),
]
