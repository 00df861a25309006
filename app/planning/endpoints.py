"""/tasks/{uuid}/planning: planning history."""

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.api.deps import TaskUUID, service
from app.api.errors import ERROR_RESPONSES
from app.api.routing import OrjsonRoute
from app.planning.schemas import PlanEntry, PlanEntryIn, PlanItem, PlanPage
from app.planning.service import PlanningService

PlanningDep = Annotated[PlanningService, service("planning")]

router = APIRouter(
    route_class=OrjsonRoute,
    prefix="/tasks/{uuid}/planning",
    tags=["planning"],
    responses=ERROR_RESPONSES,
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=PlanEntry)
async def add_plan_entry(uuid: TaskUUID, body: PlanEntryIn, planning: PlanningDep) -> PlanEntry:
    """Record a planning step: free text, a checklist of items with their status, or both."""
    return PlanEntry.model_validate(await planning.append(uuid, body.record()))


@router.get("", response_model=PlanPage)
async def list_plan_entries(
    uuid: TaskUUID,
    planning: PlanningDep,
    after_id: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> PlanPage:
    """Planning history, oldest first, paginated by id; and the current plan items."""
    entries, more, current = await planning.page(uuid, after_id, limit)
    items = current.items if current else ()
    return PlanPage(
        planning=[PlanEntry.model_validate(e) for e in entries],
        next_after_id=entries[-1]["id"] if more else None,
        current_items=[PlanItem(id=i.id, text=i.text, status=i.status) for i in items],
        current_entry_id=current.entry_id if current else None,
    )
