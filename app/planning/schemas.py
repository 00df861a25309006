"""Planning entries, with seed 000 §11.5's field names."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class PlanEntryIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"plan_type": "initial", "plan_content": "1. Read a.py\n2. Fix the bug"}]
        },
    )
    plan_type: str = Field(min_length=1, max_length=64, examples=["initial", "revision"])
    plan_content: str | dict[str, Any] | list[Any]


class PlanEntry(BaseModel):
    id: int
    plan_type: str
    plan_content: str | dict[str, Any] | list[Any]
    created_at: str


class PlanPage(BaseModel):
    planning: list[PlanEntry]
    next_after_id: int | None
