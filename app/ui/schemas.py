"""The query strings of the ops page's forms."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.db.base import UTCBound
from app.lifecycle import TaskStatus
from app.stats.schemas import Bucket
from app.tasks.repository import FILTER_COLUMNS


class _Form(BaseModel):
    """A GET form sends every field, the empty ones as "": those filter nothing."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _blank_is_absent(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v not in ("", None)}
        return value


class TaskFilters(_Form):
    status: TaskStatus | None = None
    user: str | None = None
    task_source: str | None = None
    owner: str | None = None
    repo: str | None = None
    task_type: str | None = None
    task_id: str | None = None
    created_after: UTCBound | None = Field(None, description="Without a zone: UTC.")
    created_before: UTCBound | None = Field(None, description="Without a zone: UTC.")
    cursor: str | None = None

    def columns(self) -> dict[str, str | None]:
        """The exact-match filters, by column."""
        return {name: getattr(self, name) for name in FILTER_COLUMNS}

    def query(self, **changes: str | None) -> dict[str, str]:
        """This form's non-empty fields (with ``changes``) for a link's query string."""
        fields = self.model_dump(mode="json") | changes
        return {k: str(v) for k, v in fields.items() if v not in (None, "")}


class ContextChoice(_Form):
    thread_id: int = Field(0, ge=0, le=2**31 - 1)


class HistoryChoice(ContextChoice):
    after_seq: int = Field(0, ge=0, le=2**63 - 1)


class StatsChoice(_Form):
    bucket: Bucket = "day"
