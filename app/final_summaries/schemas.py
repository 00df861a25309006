"""Final summary answers."""

from typing import Literal

from pydantic import BaseModel, Field

from app.jobs.schemas import JobOut


class FinalSummaryOut(BaseModel):
    uuid: str
    status: Literal["ready", "pending", "failed"] = Field(
        description="ready: `summary` holds it; pending: its job is queued or running (202); "
        "failed: the job gave up (see `job.error`)."
    )
    summary: str | None
    summarizer: str | None = Field(description='e.g. "extractive" or "openai:gpt-4o-mini"')
    job: JobOut | None
