"""Request dependencies."""

from typing import Annotated
from uuid import UUID

from fastapi import Depends, Path, Query, Request

from app.lifespan import Services


def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


def task_uuid(uuid: Annotated[UUID, Path(description="The task's uuid.")]) -> str:
    return str(uuid)


ServicesDep = Annotated[Services, Depends(get_services)]
TaskUUID = Annotated[str, Depends(task_uuid)]
ThreadID = Annotated[
    int,
    Query(
        ge=0,
        le=2**31 - 1,
        description="The context: 0 is the task's root, any other number a thread of the task.",
    ),
]
