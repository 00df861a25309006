"""Cleanup body and report; the maintenance overview."""

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


class Listed(BaseModel):
    count: int = Field(description="How many there are.")
    items: list[str] = Field(description="The first of them, sorted, capped.")


class OrphansReport(BaseModel):
    directories_without_rows: Listed = Field(
        description="`{location}/{uuid}`: a task directory in running/, paused/ or completed/ "
        "that no task row names (e.g. after restoring an older database); left in place."
    )
    set_aside: Listed = Field(
        description="Entries of .orphans/ (`{uuid}.{location}.{time}`): directories without a "
        "row that a new task of the same uuid, or a second copy of a task, displaced; kept "
        "intact for an operator to inspect or remove."
    )
    rows_without_directories: Listed = Field(
        description="uuids of tasks whose directory is nowhere (their reads answer 500 "
        "task_files_missing; a delete removes the row)."
    )


class MaintenanceReport(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "orphans": {
                        "directories_without_rows": {
                            "count": 1,
                            "items": ["running/550e8400-e29b-41d4-a716-446655440000"],
                        },
                        "set_aside": {
                            "count": 1,
                            "items": [
                                "9b2d6a3e-2f0c-4a51-9a52-7f6d1e0c3b11.running."
                                "20250501T120000.000000Z"
                            ],
                        },
                        "rows_without_directories": {"count": 0, "items": []},
                    }
                }
            ]
        }
    )
    orphans: OrphansReport
