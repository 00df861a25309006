"""Request dependencies."""

from typing import Annotated
from uuid import UUID

from fastapi import Depends, Path, Query, Request

from app.auth.dependencies import PrincipalDep
from app.lifespan import Services


def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def task_uuid(
    uuid: Annotated[UUID, Path(description="The task's uuid.")],
    principal: PrincipalDep,
    services: ServicesDep,
) -> str:
    """The task's uuid, for a task the caller may see (another tenant's is 404 to a scoped key:
    not even its existence shows)."""
    value = str(uuid)
    if principal.scoped:
        await services.tasks.require_visible(value, principal)
    return value


TaskUUID = Annotated[str, Depends(task_uuid)]
ThreadID = Annotated[
    int,
    Query(
        ge=0,
        le=2**31 - 1,
        description="The context: 0 is the task's root, any other number a thread of the task.",
    ),
]
