"""The four /stats queries over the tasks table:

1. per status: count, token sum and mean, call sums, mean duration;
2. per user and status: count;
3. running tasks, newest started first, limited;
4. the latest failures with their errors;

and, for the ops page's charts, tasks, tokens, compactions and failures per hour or day of
created_at (``series_query``).

These are the queries the original design's operators ran on its SQLite file by hand.
"""

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, select

from app.db.models import Task
from app.stats.schemas import FAILURES_LIMIT, RUNNING_LIMIT, Bucket, StatsFilters
from app.stats.sql import (
    HALF,
    NARROW,
    QUARTER,
    day_of,
    estimated,
    hour_of,
    scanned,
    seconds_between,
)

KEY_COLUMNS = (Task.task_source, Task.owner, Task.repo, Task.task_type, Task.task_id)


AnySelect = Select[*tuple[Any, ...]]


@dataclass(frozen=True)
class StatsQueries:
    by_status: AnySelect
    by_user: AnySelect
    running: AnySelect
    failures: AnySelect


def _conditions(filters: StatsFilters) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if filters.since is not None:
        conditions.append(estimated(Task.created_at >= filters.since, NARROW))
    if filters.until is not None:
        conditions.append(estimated(Task.created_at < filters.until, NARROW))
    for name in ("user", "owner", "repo"):
        value = getattr(filters, name)
        if value is not None:
            conditions.append(getattr(Task, name) == value)
    if filters.task_source is not None:
        conditions.append(estimated(Task.task_source == filters.task_source, HALF))
    return conditions


def build_queries(filters: StatsFilters, running_limit: int = RUNNING_LIMIT) -> StatsQueries:
    """The statements behind /stats (also what the index-use test explains)."""
    where = _conditions(filters)
    duration = seconds_between(Task.started_at, Task.completed_at)
    by_status = (
        select(
            Task.status,
            func.count().label("tasks"),
            func.coalesce(func.sum(Task.total_tokens), 0).label("tokens"),
            func.avg(Task.total_tokens).label("average_tokens"),
            func.coalesce(func.sum(Task.llm_call_count), 0).label("llm_calls"),
            func.coalesce(func.sum(Task.tool_call_count), 0).label("tool_calls"),
            func.coalesce(func.sum(Task.compression_count), 0).label("compressions"),
            # AVG skips the NULLs of tasks that never started or finished.
            func.avg(duration).label("duration"),
        )
        .where(*where)
        .group_by(scanned(Task.status))
    )
    by_user = (
        select(Task.user, Task.status, func.count().label("tasks"))
        .where(*where)
        .group_by(Task.user, Task.status)
    )
    running = (
        select(Task.uuid, *KEY_COLUMNS, Task.user, Task.started_at)
        .where(estimated(Task.status == "running", QUARTER), *where)
        .order_by(Task.started_at.desc().nulls_last(), Task.uuid.desc())
        .limit(running_limit)
    )
    failures = (
        select(
            Task.uuid,
            *KEY_COLUMNS,
            Task.user,
            Task.error_message,
            Task.created_at,
            Task.completed_at,
        )
        .where(estimated(Task.status == "failed", QUARTER), *where)
        .order_by(Task.completed_at.desc().nulls_last(), Task.uuid.desc())
        .limit(FAILURES_LIMIT)
    )
    return StatsQueries(by_status, by_user, running, failures)


def series_query(filters: StatsFilters, bucket: Bucket) -> AnySelect:
    """Tasks created, their tokens, compactions and failures per ``bucket`` of created_at:
    one pass over the tasks the filters select (a time bound reads the created_at index)."""
    slot = (hour_of if bucket == "hour" else day_of)(Task.created_at)
    return (
        select(
            slot.label("slot"),
            func.count().label("tasks"),
            func.coalesce(func.sum(Task.total_tokens), 0).label("tokens"),
            func.coalesce(func.sum(Task.compression_count), 0).label("compactions"),
            func.coalesce(func.sum(case((Task.status == "failed", 1), else_=0)), 0).label(
                "failures"
            ),
        )
        .where(*_conditions(filters))
        .group_by(slot)
        .order_by(slot)
    )
