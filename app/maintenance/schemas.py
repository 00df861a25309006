"""Cleanup body and report."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

# 100 years: larger values only risk overflowing the cutoff's date arithmetic.
MAX_DAYS = 36_500


class CleanupBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"older_than_days": 30, "dry_run": True}]},
    )
    older_than_days: int | None = Field(
        None,
        strict=True,  # false or "30" must not pass for a number of days
        ge=0,
        le=MAX_DAYS,
        description="Remove tasks finished more than this many days ago; 0: every finished task. "
        "Absent: CLEANUP_DAYS (required when CLEANUP_DAYS is 0).",
    )
    dry_run: bool = Field(
        False, strict=True, description="Report what would be removed; change nothing."
    )


class CleanupReport(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "cutoff": "2025-05-01T12:00:00Z",
                    "older_than_days": 30,
                    "dry_run": False,
                    "matched": 2,
                    "removed": 2,
                    "skipped": 0,
                    "failed": 0,
                    "uuids": [
                        "550e8400-e29b-41d4-a716-446655440000",
                        "9b2d6a3e-2f0c-4a51-9a52-7f6d1e0c3b11",
                    ],
                    "uuids_omitted": 0,
                }
            ]
        }
    )
    cutoff: datetime = Field(description="Completed or failed before this instant: a candidate.")
    older_than_days: int
    dry_run: bool
    matched: int = Field(description="Candidates found.")
    removed: int = Field(description="Tasks removed, row and directory (0 in a dry run).")
    skipped: int = Field(
        description="Candidates deleted meanwhile by another request or no longer finished."
    )
    failed: int = Field(description="Candidates whose removal failed (logged; tried next time).")
    uuids: list[str] = Field(
        description="The removed tasks (in a dry run, the matched ones), oldest first, capped."
    )
    uuids_omitted: int = Field(description="How many more uuids the capped list leaves out.")
