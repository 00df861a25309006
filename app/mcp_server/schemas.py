"""What the plan tools answer."""

from typing import Any

from pydantic import BaseModel, Field

from app.planning.items import CurrentItems, render_items
from app.planning.schemas import PlanEntry, PlanItem


class PlanView(BaseModel):
    uuid: str
    latest_entry: PlanEntry | None = Field(description="The newest planning entry; null: none.")
    current_items: list[PlanItem] = Field(
        description="The checklist now: the items of the latest entry that carries items."
    )
    current_entry_id: int | None = Field(description="The entry that set current_items.")
    checklist: str | None = Field(
        description="current_items as the pinned plan shows them, one line each."
    )


def plan_view(
    task_uuid: str, latest: dict[str, Any] | None, current: CurrentItems | None
) -> PlanView:
    items = current.items if current is not None else ()
    return PlanView(
        uuid=task_uuid,
        latest_entry=PlanEntry.model_validate(latest) if latest is not None else None,
        current_items=[PlanItem(id=i.id, text=i.text, status=i.status) for i in items],
        current_entry_id=current.entry_id if current is not None else None,
        checklist=render_items(items) if items else None,
    )
