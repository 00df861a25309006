"""Request dependencies."""

from typing import Annotated
from uuid import UUID

from fastapi import Depends, Path, Request

from app.lifespan import Services


def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


def task_uuid(uuid: Annotated[UUID, Path(description="The task's uuid.")]) -> str:
    return str(uuid)


ServicesDep = Annotated[Services, Depends(get_services)]
TaskUUID = Annotated[str, Depends(task_uuid)]
