"""Starting threads and reading the tree (SPEC §8)."""

import logging
from datetime import UTC, datetime

from sqlalchemy import select

from app.config import Settings
from app.context.store import ContextStore
from app.db.models import Task, Thread
from app.errors import Conflict, NotFound, TaskNotFound, TaskNotWritable
from app.threads.schemas import ThreadCreate, ThreadOut
from app.threads.windows import ROOT, may_start_under, window_of

log = logging.getLogger(__name__)

# The root context's status follows its task's.
ROOT_STATUS = {
    "running": "active",
    "paused": "active",
    "completed": "completed",
    "failed": "aborted",
}


class ThreadService:
    def __init__(self, store: ContextStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def start(self, task_uuid: str, body: ThreadCreate) -> ThreadOut:
        async with self.store.locked(task_uuid) as locked:  # one new id at a time per task
            task = locked.task
            if task.status != "running":
                raise TaskNotWritable(task_uuid, task.status, "start threads")
            async with self.store.db.transaction() as session:
                rows = await session.scalars(select(Thread).where(Thread.task_uuid == task_uuid))
                threads = {t.thread_id: t for t in rows}
                parent_depth = self._parent_depth(threads, body.parent_thread_id)
                max_depth = min(body.max_depth, self.settings.stelis_max_depth)
                if not may_start_under(parent_depth, max_depth):
                    raise Conflict(
                        f"a thread under thread {body.parent_thread_id} would be level "
                        f"{parent_depth + 2}; at most {max_depth} levels",
                        code="thread_depth_exceeded",
                        details={"depth": parent_depth + 1, "max_depth": max_depth},
                    )
                thread = Thread(
                    task_uuid=task_uuid,
                    thread_id=max(threads, default=ROOT) + 1,
                    parent_thread_id=body.parent_thread_id,
                    depth=parent_depth + 1,
                    window_ratio=body.window_ratio or self.settings.stelis_default_window_ratio,
                    status="active",
                    label=body.label,
                    chronicle_prompt=body.chronicle_prompt,
                    created_at=datetime.now(UTC),
                )
                session.add(thread)
            threads[thread.thread_id] = thread
        log.info("task %s: thread %d started", task_uuid, thread.thread_id)
        return _out(thread, threads, task)

    def _parent_depth(self, threads: dict[int, Thread], parent_id: int) -> int:
        if parent_id == ROOT:
            return 0
        parent = threads.get(parent_id)
        if parent is None:
            raise NotFound(
                f"thread {parent_id} does not exist",
                code="thread_not_found",
                details={"thread_id": parent_id},
            )
        if parent.status != "active":
            raise Conflict(
                f"thread {parent_id} is {parent.status}",
                code="thread_not_active",
                details={"thread_id": parent_id, "status": parent.status},
            )
        return parent.depth

    async def tree(self, task_uuid: str) -> ThreadOut:
        """The root context (thread 0) with its threads nested under their parents."""
        async with self.store.db.reader() as session:
            task = await session.get(Task, task_uuid)
            if task is None:
                raise TaskNotFound(task_uuid)
            rows = await session.scalars(
                select(Thread).where(Thread.task_uuid == task_uuid).order_by(Thread.thread_id)
            )
            threads = {t.thread_id: t for t in rows}
        nodes = {ROOT: _root(task)} | {i: _out(t, threads, task) for i, t in threads.items()}
        for thread_id, thread in threads.items():
            nodes[thread.parent_thread_id].children.append(nodes[thread_id])
        return nodes[ROOT]


def _root(task: Task) -> ThreadOut:
    return ThreadOut(
        thread_id=ROOT,
        parent_thread_id=None,
        depth=0,
        window_ratio=1.0,
        window=task.context_length,
        status=ROOT_STATUS[task.status],
        label=None,
        chronicle_prompt=None,
        chronicle_summary=None,
        created_at=task.created_at,
        completed_at=task.completed_at,
    )


def _out(thread: Thread, threads: dict[int, Thread], task: Task) -> ThreadOut:
    return ThreadOut(
        thread_id=thread.thread_id,
        parent_thread_id=thread.parent_thread_id,
        depth=thread.depth,
        window_ratio=thread.window_ratio,
        window=window_of(thread.thread_id, threads, task.context_length),
        status=thread.status,
        label=thread.label,
        chronicle_prompt=thread.chronicle_prompt,
        chronicle_summary=thread.chronicle_summary,
        created_at=thread.created_at,
        completed_at=thread.completed_at,
    )
