"""Job answers."""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

JobStatus = Literal["queued", "running", "succeeded", "failed", "skipped"]


class JobOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    task_uuid: str
    thread_id: int
    kind: str
    status: JobStatus
    attempts: int
    max_attempts: int
    error: str | None
    result: dict[str, Any] | None
    not_before: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobPage(BaseModel):
    jobs: list[JobOut]
