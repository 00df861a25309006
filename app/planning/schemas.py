"""Planning entries, with the field names of the original design's planning.jsonl (plan_type,
plan_content, created_at), and the plan items an entry may carry."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from app.planning.items import PlanStatus

MAX_PLAN_ITEMS = 200


class PlanItemIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Unique within the entry; default: the item's position, from 1.",
    )
    text: str = Field(min_length=1, max_length=2000)
    status: PlanStatus = "pending"

    @field_validator("id", "text")
    @classmethod
    def one_line(cls, value: str | None) -> str | None:
        # An item is one line of the rendered checklist: a line break would forge another.
        if value is not None and ("\n" in value or "\r" in value):
            raise ValueError("must be one line (no line breaks)")
        return value


class PlanItem(BaseModel):
    id: str
    text: str
    status: PlanStatus


class PlanEntryIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"plan_type": "initial", "plan_content": "1. Read a.py\n2. Fix the bug"},
                {
                    "plan_type": "revision",
                    "items": [
                        {"id": "1", "text": "Read a.py", "status": "done"},
                        {"id": "2", "text": "Fix the bug", "status": "active"},
                        {"id": "3", "text": "Run the tests", "status": "pending"},
                    ],
                },
            ]
        },
    )
    plan_type: str = Field(min_length=1, max_length=64, examples=["initial", "revision"])
    plan_content: str | dict[str, Any] | list[Any] | None = Field(
        default=None, description="Free text or JSON; may be left out when items are given."
    )
    items: list[PlanItemIn] | None = Field(
        default=None,
        max_length=MAX_PLAN_ITEMS,
        validate_default=True,
        description="The whole checklist, replacing the current items ([] clears them); "
        "an entry without items leaves them as they are.",
    )

    @field_validator("items")
    @classmethod
    def numbered_once(
        cls, items: list[PlanItemIn] | None, info: ValidationInfo
    ) -> list[PlanItemIn] | None:
        if items is None:
            if info.data.get("plan_content") is None:
                raise ValueError("an entry needs plan_content, items, or both")
            return None
        seen: set[str] = set()
        for position, item in enumerate(items, start=1):
            item.id = item.id or str(position)
            if item.id in seen:
                raise ValueError(f"item id {item.id!r} is given twice; ids must be unique")
            seen.add(item.id)
        return items

    def record(self) -> dict[str, Any]:
        """The entry as planning.jsonl keeps it: ``items`` only when given."""
        content = "" if self.plan_content is None else self.plan_content
        fields: dict[str, Any] = {"plan_type": self.plan_type, "plan_content": content}
        if self.items is not None:
            fields["items"] = [item.model_dump() for item in self.items]
        return fields


class PlanEntry(BaseModel):
    id: int
    plan_type: str
    plan_content: str | dict[str, Any] | list[Any]
    # Only entries that carry items show the key: a free-text entry reads as it always did.
    items: list[PlanItem] | None = Field(default=None, exclude_if=lambda items: items is None)
    created_at: str


class PlanPage(BaseModel):
    planning: list[PlanEntry]
    next_after_id: int | None
    current_items: list[PlanItem] = Field(
        description="The checklist now: the items of the latest entry that carries items."
    )
    current_entry_id: int | None = Field(description="The entry that set current_items.")
