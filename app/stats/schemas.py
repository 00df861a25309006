"""The /stats filters and answer."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db.base import UTCBound
from app.task_key import TaskKey

RUNNING_LIMIT = 100  # running tasks listed by default (the total is always given)
FAILURES_LIMIT = 10

Bucket = Literal["hour", "day"]  # the slots of a time series


class StatsFilters(BaseModel):
    """Which tasks the figures cover; every field narrows, None leaves it open."""

    since: UTCBound | None = Field(
        None,
        description="created_at >= since (inclusive); without a zone, UTC.",
        examples=["2026-11-01T00:00:00Z"],
    )
    until: UTCBound | None = Field(
        None,
        description="created_at < until (exclusive); without a zone, UTC.",
        examples=["2026-12-01T00:00:00Z"],
    )
    user: str | None = Field(None, description="Exact match.", examples=["notfolder"])
    owner: str | None = Field(None, description="Exact match.", examples=["notfolder"])
    repo: str | None = Field(None, description="Exact match.", examples=["coding_agent"])
    task_source: str | None = Field(None, description="Exact match.", examples=["github"])

    @model_validator(mode="after")
    def _ordered(self) -> "StatsFilters":
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since must not be later than until")
        return self


class StatsQuery(StatsFilters):
    """The query string of GET /stats: the filters and how many running tasks to list."""

    # A misspelt filter (e.g. GET /tasks' created_after) would otherwise widen the figures
    # silently.
    model_config = ConfigDict(extra="forbid")

    running_limit: int = Field(
        RUNNING_LIMIT, ge=0, le=1000, description="How many running tasks to list."
    )

    def filters(self) -> StatsFilters:
        return StatsFilters.model_validate(self.model_dump(exclude={"running_limit"}))


class StatusCounts(BaseModel):
    running: int = 0
    paused: int = 0
    completed: int = 0
    failed: int = 0


class UserCounts(BaseModel):
    user: str | None = Field(description="null for tasks created without a user.")
    total: int
    by_status: StatusCounts


class RunningTask(BaseModel):
    uuid: str
    task_key: TaskKey
    user: str | None
    started_at: datetime | None


class RunningTasks(BaseModel):
    total: int = Field(description="Every running task in the filter.")
    tasks: list[RunningTask] = Field(description="Newest started first, at most running_limit.")


class Failure(BaseModel):
    uuid: str
    task_key: TaskKey
    user: str | None
    error_message: str | None
    created_at: datetime
    completed_at: datetime | None


class TokenUsage(BaseModel):
    tasks: int = Field(description="How many tasks the figures cover.")
    total: int = Field(description="Sum of the tasks' total_tokens (reported by LLM calls).")
    average: float | None = Field(description="Per task; null when there are none.")


class TokenTotals(BaseModel):
    completed: TokenUsage
    all: TokenUsage


class CallTotals(BaseModel):
    llm_calls: int
    tool_calls: int
    compressions: int


class StatsOut(BaseModel):
    filters: StatsFilters = Field(description="The filters applied, bounds normalised to UTC.")
    total_tasks: int
    by_status: StatusCounts
    by_user: list[UserCounts] = Field(
        description="Most tasks first, then by user name (tasks without a user last)."
    )
    running: RunningTasks
    latest_failures: list[Failure] = Field(
        description=f"The {FAILURES_LIMIT} latest failed tasks, latest completed_at first."
    )
    average_duration_s: float | None = Field(
        description="Mean completed_at - started_at of completed tasks, in seconds; null if none."
    )
    tokens: TokenTotals
    calls: CallTotals = Field(description="Sums over every task in the filter.")


class SeriesPoint(BaseModel):
    """One slot of a time series: the tasks created in [start, start + bucket)."""

    start: datetime
    tasks: int
    tokens: int
    compactions: int
    failures: int = Field(description="Of the tasks created in the slot, those that failed.")
