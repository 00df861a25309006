"""The /stats figures: four aggregate queries over the tasks table, in one read transaction.

The queries are in app/stats/repository.py; everything is summed and averaged by the database,
and Python only reshapes the few group rows here.
"""

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, get_args

from app.db.engine import Database
from app.lifecycle import TaskStatus
from app.stats.repository import build_queries, series_query
from app.stats.schemas import (
    RUNNING_LIMIT,
    Bucket,
    CallTotals,
    Failure,
    RunningTask,
    RunningTasks,
    SeriesPoint,
    StatsFilters,
    StatsOut,
    StatusCounts,
    TokenTotals,
    TokenUsage,
    UserCounts,
)
from app.task_key import TaskKey

STATUSES: tuple[str, ...] = get_args(TaskStatus)
# How long a slot is, and how the database names one (app/stats/sql.py: day_of, hour_of).
SLOTS: dict[Bucket, tuple[timedelta, str]] = {
    "hour": (timedelta(hours=1), "%Y-%m-%dT%H"),
    "day": (timedelta(days=1), "%Y-%m-%d"),
}
MAX_SLOTS = 2000  # a longer series keeps its newest slots: a chart shows no more


def slot_start(moment: datetime, bucket: Bucket) -> datetime:
    """The start of the slot holding ``moment`` (UTC)."""
    start = moment.replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if bucket == "day" else start


def _key(row: Any) -> TaskKey:
    return TaskKey(
        task_source=row.task_source,
        owner=row.owner,
        repo=row.repo,
        task_type=row.task_type,
        task_id=row.task_id,
    )


def _float(value: Any) -> float | None:
    """PostgreSQL answers AVG and EXTRACT with NUMERIC (Decimal); SQLite with REAL."""
    return None if value is None else float(value)


class StatsService:
    def __init__(self, db: Database, flush_pending: Callable[[], Awaitable[None]]) -> None:
        self.db = db
        self.flush_pending = flush_pending  # the counters of appends not yet in the tasks table

    async def stats(self, filters: StatsFilters, *, running_limit: int = RUNNING_LIMIT) -> StatsOut:
        queries = build_queries(filters, running_limit)
        await self.flush_pending()
        # One read transaction: the four answers describe the same snapshot.
        async with self.db.reader() as session, session.begin():
            groups = {row.status: row for row in await session.execute(queries.by_status)}
            pairs = list(await session.execute(queries.by_user))
            running = list(await session.execute(queries.running))
            failures = list(await session.execute(queries.failures))

        counts = {s: int(groups[s].tasks) if s in groups else 0 for s in STATUSES}
        total_tasks = sum(counts.values())
        all_tokens = sum(int(row.tokens) for row in groups.values())
        completed = groups.get("completed")

        users: dict[str | None, dict[str, int]] = {}
        for row in pairs:
            users.setdefault(row.user, {})[row.status] = int(row.tasks)
        by_user = [
            UserCounts(user=user, total=sum(c.values()), by_status=StatusCounts(**c))
            for user, c in users.items()
        ]
        by_user.sort(key=lambda u: (-u.total, u.user is None, u.user or ""))

        return StatsOut(
            filters=filters,
            total_tasks=total_tasks,
            by_status=StatusCounts(**counts),
            by_user=by_user,
            running=RunningTasks(
                total=counts["running"],
                tasks=[
                    RunningTask(uuid=r.uuid, task_key=_key(r), user=r.user, started_at=r.started_at)
                    for r in running
                ],
            ),
            latest_failures=[
                Failure(
                    uuid=r.uuid,
                    task_key=_key(r),
                    user=r.user,
                    error_message=r.error_message,
                    created_at=r.created_at,
                    completed_at=r.completed_at,
                )
                for r in failures
            ],
            average_duration_s=_float(completed.duration if completed else None),
            tokens=TokenTotals(
                completed=TokenUsage(
                    tasks=counts["completed"],
                    total=int(completed.tokens) if completed else 0,
                    average=_float(completed.average_tokens if completed else None),
                ),
                # The four status groups partition the filter: their sums are the whole.
                all=TokenUsage(
                    tasks=total_tasks,
                    total=all_tokens,
                    average=all_tokens / total_tasks if total_tasks else None,
                ),
            ),
            calls=CallTotals(
                llm_calls=sum(int(row.llm_calls) for row in groups.values()),
                tool_calls=sum(int(row.tool_calls) for row in groups.values()),
                compressions=sum(int(row.compressions) for row in groups.values()),
            ),
        )

    async def series(
        self, since: datetime, until: datetime, bucket: Bucket, filters: StatsFilters
    ) -> list[SeriesPoint]:
        """Per slot of ``bucket`` from since's to until's (``filters`` narrowing the tasks):
        tasks created, their tokens, compactions and failures; empty slots as zeros."""
        step, pattern = SLOTS[bucket]
        last = slot_start(until, bucket)
        first = max(slot_start(since, bucket), last - (MAX_SLOTS - 1) * step)
        bounded = filters.model_copy(update={"since": first, "until": last + step})
        await self.flush_pending()
        async with self.db.reader() as session:
            rows = {row.slot: row for row in await session.execute(series_query(bounded, bucket))}
        points = []
        start = first
        while start <= last:
            row = rows.get(start.strftime(pattern))
            points.append(
                SeriesPoint(
                    start=start,
                    tasks=int(row.tasks) if row else 0,
                    tokens=int(row.tokens) if row else 0,
                    compactions=int(row.compactions) if row else 0,
                    failures=int(row.failures) if row else 0,
                )
            )
            start += step
        return points
