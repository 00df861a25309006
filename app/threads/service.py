"""Starting, ending and aborting threads, and reading the tree."""

import dataclasses
import logging
from datetime import UTC, datetime

from app.budgets.windows import MIN_WINDOW, ROOT, descendants_of, may_start_under, window_of
from app.config import Settings
from app.context.store import AfterCommit, ContextStore, LockedTask
from app.db.models import Job, Task, Thread
from app.errors import (
    Conflict,
    ErrorCode,
    InvalidInput,
    TaskNotFound,
    TaskNotWritable,
    ThreadNotActive,
    ThreadNotFound,
)
from app.jobs.queue import JobQueue
from app.threads import repository
from app.threads.anchors import one_line
from app.threads.chronicle import KIND as CHRONICLE
from app.threads.schemas import ThreadCreate, ThreadEnd, ThreadOut

log = logging.getLogger(__name__)

# The root context's status follows its task's.
ROOT_STATUS = {
    "running": "active",
    "paused": "active",
    "completed": "completed",
    "failed": "aborted",
}


class ThreadService:
    def __init__(
        self,
        store: ContextStore,
        condense_trigger: AfterCommit,
        jobs: JobQueue,
        settings: Settings,
    ) -> None:
        self.store = store
        self.condense_trigger = condense_trigger
        self.jobs = jobs
        self.settings = settings

    async def start(self, task_uuid: str, body: ThreadCreate) -> ThreadOut:
        """A new thread under an active context: its files, its row and head, then its anchor
        in the parent (one new id at a time per task: the task lock is held)."""
        async with self.store.locked(task_uuid, body.parent_thread_id, with_threads=True) as parent:
            self._require_writable(parent, "start threads")
            threads = parent.threads
            parent_depth = parent.thread.depth if parent.thread else 0
            max_depth = min(body.max_depth, self.settings.threads.max_depth)
            if not may_start_under(parent_depth, max_depth):
                raise Conflict(
                    f"a thread under thread {body.parent_thread_id} would be at depth "
                    f"{parent_depth + 1}; max_depth is {max_depth} (the root is at depth 0)",
                    code=ErrorCode.THREAD_DEPTH_EXCEEDED,
                    details={"depth": parent_depth + 1, "max_depth": max_depth},
                )
            ratio = body.window_ratio or self.settings.threads.default_window_ratio
            parent_window = window_of(body.parent_thread_id, threads, parent.task.context_length)
            window = int(parent_window * ratio)  # truncated, as window_of computes it
            if window < MIN_WINDOW:
                raise InvalidInput(
                    f"a thread of {ratio} of context {body.parent_thread_id}'s window "
                    f"({parent_window} tokens) would have {window}; a context needs at least "
                    f"{MIN_WINDOW}",
                    code=ErrorCode.THREAD_WINDOW_TOO_SMALL,
                    details={"window": window, "min_window": MIN_WINDOW},
                )
            head = await self.store.recovered_head(parent)
            if head.open_tool_calls:  # the anchor may not come between calls and results
                raise Conflict(
                    f"context {body.parent_thread_id} waits for tool results; a thread can "
                    "start once they are in",
                    code=ErrorCode.TOOL_RESULTS_PENDING,
                    details={"open": [call[0] for call in head.open_tool_calls]},
                )
            thread = Thread(
                task_uuid=task_uuid,
                thread_id=max(threads, default=ROOT) + 1,
                parent_thread_id=body.parent_thread_id,
                depth=parent_depth + 1,
                window_ratio=ratio,
                status="active",
                label=body.label,
                chronicle_prompt=body.chronicle_prompt,
                message_count=0,
                created_at=datetime.now(UTC),
            )
            await self.store.create_context(parent, thread)
            # After the commit: a crash in between leaves a thread without its anchor, never
            # an anchor without its thread.
            parent = dataclasses.replace(parent, head=head)
            anchor = {
                "role": "system",
                "content": one_line(thread.thread_id, thread.label),
                "stelis_anchor": thread.thread_id,
            }
            new_head, _ = await self.store.append_locked(parent, [anchor])
            threads[thread.thread_id] = thread
        await self.condense_trigger(parent, head, new_head)
        log.info("task %s: thread %d started", task_uuid, thread.thread_id)
        return _out(thread, threads, parent.task)

    async def end(
        self, task_uuid: str, thread_id: int, body: ThreadEnd, *, abort: bool
    ) -> ThreadOut:
        """End (completed) or abort a thread; its active descendants are aborted with it when
        ``cascade``, else they make it 409. Chronicles are queued with the change: the
        thread's when asked for (always tried for an abort: a partial one), its descendants'."""
        async with self.store.locked(task_uuid, thread_id) as locked:
            self._require_writable(locked, "end threads")
            threads = locked.threads
            active = [
                t for t in descendants_of(thread_id, threads) if threads[t].status == "active"
            ]
            if active and not body.cascade:
                raise Conflict(
                    f"thread {thread_id} has active threads under it: {active}; end them first "
                    "or pass cascade",
                    code=ErrorCode.THREAD_HAS_ACTIVE_CHILDREN,
                    details={"thread_id": thread_id, "active": active},
                )
            now = datetime.now(UTC)
            outcome = "aborted" if abort else "completed"
            chronicled = [*active, thread_id] if body.generate_chronicle else active
            jobs: list[Job] = [
                self.jobs.new(task_uuid, CHRONICLE, thread_id=t)
                for t in chronicled
                if threads[t].message_count
            ]
            async with self.store.db.transaction() as session:
                for row in await repository.threads_of(session, task_uuid, [*active, thread_id]):
                    row.status = outcome if row.thread_id == thread_id else "aborted"
                    row.completed_at = now
                    threads[row.thread_id] = row
                session.add_all(jobs)
        self.jobs.notify()
        log.info(
            "task %s: thread %d %s (and %d under it)", task_uuid, thread_id, outcome, len(active)
        )
        return _out(threads[thread_id], threads, locked.task)

    def _require_writable(self, locked: LockedTask, doing: str) -> None:
        task = locked.task
        if task.status != "running":
            raise TaskNotWritable(task.uuid, task.status, doing)
        thread = locked.thread
        if thread is not None and thread.status != "active":
            raise ThreadNotActive(task.uuid, thread.thread_id, thread.status)

    async def get(self, task_uuid: str, thread_id: int) -> ThreadOut:
        """One context with the threads under it."""
        pending = [await self.tree(task_uuid)]
        while pending:
            node = pending.pop()
            if node.thread_id == thread_id:
                return node
            pending += node.children
        raise ThreadNotFound(task_uuid, thread_id)

    async def tree(self, task_uuid: str) -> ThreadOut:
        """The root context (thread 0) with its threads nested under their parents."""
        await self.store.flush([task_uuid])  # message counts, with every acknowledged append
        async with self.store.db.reader() as session:
            task = await session.get(Task, task_uuid)
            if task is None:
                raise TaskNotFound(task_uuid)
            threads = {t.thread_id: t for t in await repository.threads_of(session, task_uuid)}
        nodes = {ROOT: _root(task, threads)}
        nodes |= {i: _out(t, threads, task) for i, t in threads.items()}
        for thread_id, thread in threads.items():
            nodes[thread.parent_thread_id].children.append(nodes[thread_id])
        return nodes[ROOT]


def _root(task: Task, threads: dict[int, Thread]) -> ThreadOut:
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
        # The task counts every context's messages (never below 0: see the store's
        # from-scratch rebuild, which counts the root's alone).
        message_count=max(0, task.total_messages - sum(t.message_count for t in threads.values())),
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
        message_count=thread.message_count,
        created_at=thread.created_at,
        completed_at=thread.completed_at,
    )
