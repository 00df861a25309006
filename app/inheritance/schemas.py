"""What a task inherited, and the finished runs a new one may inherit from."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.lifecycle import TaskStatus


class InheritanceRecord(BaseModel):
    """What a task inherited at creation."""

    from_uuid: str
    status: TaskStatus
    completed_at: datetime | None
    error_message: str | None
    summary_source: Literal["final_summary", "condense_summary", "none"] = Field(
        description="condense_summary: the final summary was still pending after the wait."
    )
    planning_entries: int
    truncated: bool = Field(description="The message was cut to max_summary_tokens.")
    tokens: int
    max_summary_tokens: int
    seq: int = Field(description="The inherited context message's seq.")
    notification_comment: str


class InheritanceOut(BaseModel):
    uuid: str
    inherited_from: str | None
    inheritance: InheritanceRecord | None
    notification_comment: str | None


class Candidate(BaseModel):
    uuid: str
    status: TaskStatus
    completed_at: datetime | None
    error_message: str | None
    final_summary_ready: bool


class CandidatePage(BaseModel):
    candidates: list[Candidate] = Field(description="Newest completion first.")
