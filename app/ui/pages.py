"""What each page of the ops page shows, gathered from the services the JSON API uses (no SQL
of its own): the task list, one task, a page of its history, the statistics over time."""

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.budgets.service import Budgets
from app.context.files import visible_records
from app.context.store import ContextStore
from app.errors import Conflict
from app.final_summaries.service import FinalSummary, FinalSummaryService
from app.formats import native_format
from app.inheritance.presenters import inherited
from app.inheritance.schemas import InheritanceRecord
from app.jobs.queue import JobQueue
from app.jobs.schemas import JobOut
from app.journals.service import JournalService
from app.lifecycle import FINISHED
from app.messages.schemas import MessagePage
from app.messages.service import MessageService
from app.stats.schemas import Bucket, SeriesPoint, StatsFilters, StatsOut
from app.stats.service import StatsService
from app.tasks.presenters import task_out
from app.tasks.repository import encode_cursor
from app.tasks.schemas import TaskOut
from app.tasks.service import TaskService
from app.threads.schemas import ThreadOut
from app.threads.service import ThreadService
from app.ui.charts import BarChart, ContextEntry, ContextPicture, bar_chart, context_entry
from app.ui.charts import context_picture as draw_context

TASKS_PER_PAGE = 50
MESSAGES_PER_PAGE = 20
TIMELINE_LIMIT = 500  # compactions shown on a task's page (the oldest first)
JOBS_LIMIT = 100
RUNNING_SHOWN = 20  # running tasks the stats page lists (the total is always given)
SERIES_SPANS: dict[Bucket, timedelta] = {"hour": timedelta(hours=48), "day": timedelta(days=30)}


@dataclass(frozen=True)
class TaskListQuery:
    filters: dict[str, str | None]
    created_after: datetime | None
    created_before: datetime | None
    cursor: str | None


@dataclass(frozen=True)
class TaskList:
    tasks: list[TaskOut]
    next_cursor: str | None
    counts: dict[str, int]


@dataclass(frozen=True)
class ContextOverview:
    """One context of a task (the root or a thread) as the page draws it."""

    thread_id: int
    format: str
    tokens: int
    budget: int
    threshold: int
    window: int
    entries: list[ContextEntry]
    picture: ContextPicture


@dataclass(frozen=True)
class TaskDetail:
    task: TaskOut
    context: ContextOverview
    timeline: list[dict[str, Any]]  # summaries.jsonl records, oldest first
    timeline_more: bool
    threads: ThreadOut
    jobs: list[JobOut]
    final_summary: FinalSummary | None  # None while the task is not finished
    inheritance: InheritanceRecord | None


@dataclass(frozen=True)
class StatsPage:
    stats: StatsOut
    bucket: Bucket
    series: list[SeriesPoint]
    charts: list[BarChart]


class OpsPages:
    def __init__(
        self,
        *,
        tasks: TaskService,
        store: ContextStore,
        budgets: Budgets,
        messages: MessageService,
        summaries: JournalService,
        jobs: JobQueue,
        threads: ThreadService,
        stats: StatsService,
        final_summaries: FinalSummaryService,
    ) -> None:
        self.tasks = tasks
        self.store = store
        self.budgets = budgets
        self.messages = messages
        self.summaries = summaries
        self.jobs = jobs
        self.threads = threads
        self.stats = stats
        self.final_summaries = final_summaries

    async def task_list(self, query: TaskListQuery) -> TaskList:
        """A page of tasks, newest first (keyset pagination on the created_at index), and the
        count of every status."""
        found = await self.tasks.list(
            filters=query.filters,
            created_after=query.created_after,
            created_before=query.created_before,
            cursor=query.cursor,
            limit=TASKS_PER_PAGE,
        )
        next_cursor = encode_cursor(found[-1]) if len(found) == TASKS_PER_PAGE else None
        return TaskList(
            tasks=[task_out(self.tasks.view(task)) for task in found],
            next_cursor=next_cursor,
            counts=await self.tasks.count_by_status(),
        )

    async def task_detail(self, task_uuid: str, thread_id: int) -> TaskDetail:
        view = await self.tasks.get(task_uuid)
        task = task_out(view)
        context = await self.context(task_uuid, thread_id)
        timeline, more = await self.summaries.page(task_uuid, 0, TIMELINE_LIMIT, thread_id)
        jobs = await self.jobs.list(task_uuid=task_uuid, status=None, limit=JOBS_LIMIT)
        final = None
        if task.status in FINISHED:
            try:
                final = await self.final_summaries.get(task_uuid)
            except Conflict:  # resumed meanwhile: not finished after all
                final = None
        return TaskDetail(
            task=task,
            context=context,
            timeline=timeline,
            timeline_more=more,
            threads=await self.threads.tree(task_uuid),
            jobs=[JobOut.model_validate(job) for job in jobs],
            final_summary=final,
            inheritance=inherited(view.task)[0],
        )

    async def context(self, task_uuid: str, thread_id: int) -> ContextOverview:
        """A context's records as its payload shows them, with the budget's lines."""
        locked = await self.store.head(task_uuid, thread_id)
        fmt = native_format(locked.task.llm_provider)
        budget = self.budgets.context_budget(locked)
        tokens = self.budgets.context_tokens(locked, locked.head, fmt)
        snapshot = await self.store.snapshot(task_uuid, "messages", thread_id)
        try:
            records = await asyncio.to_thread(
                lambda: [
                    context_entry(record, fmt)
                    for record in visible_records(snapshot.handle, snapshot.head.messages_bytes)
                ]
            )
        finally:
            snapshot.close()
        return ContextOverview(
            thread_id=thread_id,
            format=fmt,
            tokens=tokens,
            budget=budget.allowed,
            threshold=budget.threshold,
            window=budget.window,
            entries=records,
            picture=draw_context(records, tokens, budget.allowed, budget.threshold),
        )

    async def history(self, task_uuid: str, after_seq: int, thread_id: int) -> MessagePage:
        """MESSAGES_PER_PAGE records of the history after ``after_seq``, as posted."""
        return await self.messages.history(task_uuid, after_seq, MESSAGES_PER_PAGE, thread_id)

    async def counts(self) -> dict[str, int]:
        return await self.tasks.count_by_status()

    async def stats_page(self, bucket: Bucket, now: datetime | None = None) -> StatsPage:
        """The /stats figures, and tasks, tokens, compactions and failures per hour (the last
        48 hours) or per day (the last 30 days) of created_at."""
        until = now or datetime.now(UTC)
        figures = await self.stats.stats(StatsFilters(), running_limit=RUNNING_SHOWN)
        series = await self.stats.series(
            until - SERIES_SPANS[bucket], until, bucket, StatsFilters()
        )
        label = "%m-%d %H:00" if bucket == "hour" else "%Y-%m-%d"
        charts = [
            bar_chart(title, [(p.start.strftime(label), getattr(p, field)) for p in series])
            for title, field in (
                ("Tasks created", "tasks"),
                ("Tokens used", "tokens"),
                ("Compactions", "compactions"),
                ("Failures", "failures"),
            )
        ]
        return StatsPage(stats=figures, bucket=bucket, series=series, charts=charts)
