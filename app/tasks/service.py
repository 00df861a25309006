"""Task lookup, listing, status transitions and deletion (creation: app/tasks/creation.py)."""

import logging
import shutil
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from app import lifecycle
from app.budgets.service import Budgets
from app.config import Settings
from app.context.records import HeadState
from app.context.store import ContextStore
from app.db.models import Job, Task
from app.errors import ErrorCode, StorageError
from app.formats import native_format
from app.jobs.queue import JobQueue
from app.storage.layout import STATUS_DIRS
from app.storage.threads import finish_in_thread
from app.tasks import repository
from app.tasks.presenters import task_out
from app.tasks.views import TaskView
from app.threads import repository as threads_repository
from app.webhooks.selection import EVENTS, hooks_for

log = logging.getLogger(__name__)


class TaskService:
    def __init__(
        self, store: ContextStore, budgets: Budgets, jobs: JobQueue, settings: Settings
    ) -> None:
        self.store = store
        self.db = store.db
        self.layout = store.layout
        self.locks = store.locks
        self.budgets = budgets
        self.jobs = jobs
        self.settings = settings

    def view(self, task: Task, head: HeadState | None = None) -> TaskView:
        tokens = None
        if head is not None:
            tokens = self.budgets.payload_tokens(task, head, native_format(task.llm_provider))
        return TaskView(
            task=task, head=head, budget=self.budgets.budget(task), payload_tokens=tokens
        )

    # -- read -----------------------------------------------------------------------------

    async def get(self, task_uuid: str) -> TaskView:
        await self.store.flush([task_uuid])  # its counters, with every acknowledged append
        context = await self.store.head(task_uuid)
        return self.view(context.task, context.head)

    async def list(self, **query: Any) -> list[Task]:
        await self.store.flush()
        async with self.db.reader() as session:
            return await repository.list_tasks(session, **query)

    async def count_by_status(self) -> dict[str, int]:
        """How many tasks have each status (one grouped read of the status index)."""
        async with self.db.reader() as session:
            return await repository.count_by_status(session)

    # -- lifecycle ------------------------------------------------------------------------

    async def transition(
        self, task_uuid: str, action: str, *, error_message: str | None = None
    ) -> TaskView:
        layout = self.layout
        async with self.store.locked(task_uuid) as locked:
            task = locked.task
            target = lifecycle.next_status(action, task.status)
            head = await self.store.recovered_head(locked)
            await self.store.flush_held(task_uuid)  # the row below has every append's counts
            source_dir, target_dir = STATUS_DIRS[task.status], STATUS_DIRS[target]
            moved = False
            try:
                async with self.db.transaction() as session:
                    now = datetime.now(UTC)  # once the transaction holds the database
                    row = await session.get(Task, task_uuid)
                    assert row is not None
                    row.status = target
                    row.updated_at = now
                    if target in lifecycle.FINISHED:
                        row.completed_at = now
                        row.final_token_count = self.budgets.payload_tokens(
                            row, head, native_format(row.llm_provider)
                        )
                        row.final_message_count = head.current_messages
                    if target == "failed":
                        row.error_message = error_message
                    if target in lifecycle.FINISHED:  # threads end with their task
                        await threads_repository.abort_active(session, task_uuid, now)
                    # Follow-up work commits with the transition: it survives a restart, and
                    # it runs after the answer, so a slow LLM or a dead receiver never holds it.
                    session.add_all(self._follow_ups(self.view(row, head), action))
                    if source_dir != target_dir:
                        # Moved inside the transaction: if the commit fails we move back; if the
                        # process dies first, startup reconciliation moves it back.
                        await finish_in_thread(layout.move, task_uuid, source_dir, target_dir)
                        moved = True
            except BaseException:
                if moved:
                    await finish_in_thread(layout.move, task_uuid, target_dir, source_dir)
                raise
            self.jobs.notify()
            log.info("task %s: %s -> %s", task_uuid, task.status, target)
            return self.view(row, head)

    def _follow_ups(self, view: TaskView, action: str) -> Sequence[Job]:
        """The jobs a transition queues: the final summary, and one delivery per webhook."""
        task = view.task
        jobs: list[Job] = []
        if task.status in lifecycle.FINISHED:
            jobs.append(self.jobs.new(task.uuid, "final_summary"))
        event = EVENTS.get(action)
        if event is not None:
            names = hooks_for(self.settings.webhook.hooks, task.hooks or [], event)
            record = task_out(view).model_dump(mode="json") if names else {}
            jobs += [
                self.jobs.new(
                    task.uuid,
                    "webhook",
                    params={"hook": name, "event": event, "task": record},
                    max_attempts=self.settings.webhook.max_attempts,
                )
                for name in names
            ]
        return jobs

    async def delete(self, task_uuid: str) -> None:
        try:
            await self._delete(task_uuid)
        except StorageError as exc:
            if exc.code != ErrorCode.TASK_FILES_MISSING:
                raise
            # Removed by hand (the original design cleaned old directories with rm -rf): the
            # row goes.
            async with self.locks.hold(task_uuid):
                async with self.db.transaction() as session:
                    row = await session.get(Task, task_uuid)
                    if row is not None:
                        await session.delete(row)
                self.locks.discard(task_uuid)
            log.warning("task %s: deleted; its directory was already gone", task_uuid)

    async def _delete(self, task_uuid: str) -> None:
        layout = self.layout
        async with self.store.locked(task_uuid) as locked:
            source = STATUS_DIRS[locked.task.status]
            self.store.forget(task_uuid)
            await finish_in_thread(layout.move, task_uuid, source, ".trash")
            try:
                async with self.db.transaction() as session:
                    row = await session.get(Task, task_uuid)
                    await session.delete(row)
            except BaseException:
                await finish_in_thread(layout.move, task_uuid, ".trash", source)
                raise
            await finish_in_thread(
                shutil.rmtree, layout.location_dir(".trash", task_uuid), ignore_errors=True
            )
            self.locks.discard(task_uuid)
        log.info("task %s: deleted", task_uuid)
