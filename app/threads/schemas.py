"""Thread bodies and answers."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.db.base import DBText

ThreadStatus = Literal["active", "completed", "aborted"]


class ThreadCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"parent_thread_id": 0, "label": "fix the failing test", "window_ratio": 0.8}
            ]
        },
    )
    parent_thread_id: int = Field(
        0, strict=True, ge=0, le=2**31 - 1, description="0: the task's root context."
    )
    label: DBText | None = Field(None, max_length=255)
    window_ratio: float | None = Field(
        None, gt=0, lt=1, description="Share of the parent's window; THREADS__DEFAULT_WINDOW_RATIO."
    )
    max_depth: int = Field(
        3,
        strict=True,
        ge=1,
        le=16,
        description=(
            "The deepest a thread may be: the root is at depth 0, a thread one below its "
            "parent (capped by THREADS__MAX_DEPTH)."
        ),
    )
    chronicle_prompt: DBText | None = Field(None, max_length=100_000)


class ThreadEnd(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"generate_chronicle": True, "cascade": False}]},
    )
    generate_chronicle: bool = Field(
        True,
        strict=True,
        description="Summarise the thread (chronicle_prompt or the default) into its record "
        "and its parent's context; for an abort, a partial chronicle.",
    )
    cascade: bool = Field(
        False,
        strict=True,
        description="Abort the active threads under it too; without it they make a 409.",
    )


class ThreadOut(BaseModel):
    thread_id: int
    parent_thread_id: int | None = Field(description="null for the root context (thread 0).")
    depth: int
    window_ratio: float
    window: int = Field(description="The task's window times the ratios down the chain.")
    status: ThreadStatus
    label: str | None
    chronicle_prompt: str | None
    chronicle_summary: str | None
    message_count: int = Field(description="Messages the context has taken.")
    created_at: datetime | None
    completed_at: datetime | None
    children: list["ThreadOut"] = Field(default_factory=list)
