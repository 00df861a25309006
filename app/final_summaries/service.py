"""Writing final_summary.txt after complete/fail, and reading it back.

The job is queued in the transaction that finishes the task (app/tasks/service.py), so it runs
even if the process restarts first. The whole history is streamed from messages.jsonl (the
summariser chunks it for a chat backend whose window it exceeds). On the job's last attempt a
chat backend that keeps failing gives way to the extractive digest: a finished task always ends
up with a summary.
"""

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import DEFAULT_BACKEND, EXTRACTIVE
from app.context.files import History
from app.context.store import ContextStore
from app.db.models import Job
from app.errors import Conflict, ErrorCode
from app.final_summaries.prompt import FINAL_SUMMARY_PROMPT, header
from app.jobs.queue import ACTIVE, JobQueue
from app.lifecycle import FINISHED
from app.llm.errors import LLMError
from app.storage.jsonl import write_atomic
from app.storage.layout import FINAL_SUMMARY
from app.storage.threads import finish_in_thread
from app.summaries.summarizer import Summarizer

log = logging.getLogger(__name__)

KIND = "final_summary"


@dataclass(frozen=True)
class FinalSummary:
    status: str  # ready | pending | failed
    text: str | None
    job: Job | None


class FinalSummaryService:
    def __init__(
        self,
        store: ContextStore,
        summarizer: Summarizer,
        jobs: JobQueue,
        *,
        backend: str,
        max_tokens: int,
    ) -> None:
        self.store = store
        self.summarizer = summarizer
        self.jobs = jobs
        self.backend = backend or None
        self.max_tokens = max_tokens

    async def write(self, job: Job) -> dict[str, Any]:
        """The job handler."""
        async with self.store.locked(job.task_uuid) as locked:
            task = locked.task
            if task.status not in FINISHED:
                return {"skipped": "task_not_finished"}
            head = await self.store.recovered_head(locked)
            # The final summary's backend, the task's choice, or the default one: not the
            # (possibly cheaper) condensing backend.
            backend = self.backend or await self.store.summary_backend(locked)
            backend = backend or (
                DEFAULT_BACKEND if DEFAULT_BACKEND in self.summarizer.backends else EXTRACTIVE
            )
            if backend not in self.summarizer.backends:
                # Renamed or removed since (a task's choice outlives the configuration).
                log.warning("task %s: no backend %r; extractive summary", task.uuid, backend)
                backend = EXTRACTIVE
            handle = await self.store.open_messages(locked)
        history = History(handle, head.messages_bytes)
        try:
            try:
                text = await self._summarize(history, backend)
                summarizer = self.summarizer.describe(backend)
            except LLMError as exc:
                if job.attempts < job.max_attempts:
                    raise
                log.warning("task %s: final summary by the extractive digest: %s", task.uuid, exc)
                history = History(handle, head.messages_bytes)
                text = await self._summarize(history, EXTRACTIVE)
                summarizer = f"{EXTRACTIVE} (after {exc.backend} failed)"
        finally:
            handle.close()
        completed = task.completed_at.isoformat() if task.completed_at else "unknown"
        content = header(task.uuid, task.status, completed, task.error_message) + text.strip()
        async with self.store.locked(job.task_uuid) as locked:
            path = self.store.task_dir(locked.task) / FINAL_SUMMARY
            await finish_in_thread(
                write_atomic, path, iter([content.encode()]), fsync=self.store.fsync
            )
        log.info("task %s: final summary written (%d characters)", task.uuid, len(content))
        return {"summarizer": summarizer, "messages": history.count, "characters": len(content)}

    async def _summarize(self, history: History, backend: str | None) -> str:
        return await self.summarizer.summarize(
            iter(history), backend, prompt=FINAL_SUMMARY_PROMPT, max_tokens=self.max_tokens
        )

    async def get(self, task_uuid: str) -> FinalSummary:
        """The summary, or its job while it is pending (queued anew if a crash lost it)."""
        async with self.store.locked(task_uuid) as locked:
            task = locked.task
            if task.status not in FINISHED:
                raise Conflict(
                    f"task {task_uuid} is {task.status}: final summaries follow complete or fail",
                    code=ErrorCode.TASK_NOT_FINISHED,
                    details={"uuid": task_uuid, "status": task.status},
                )
            text = await asyncio.to_thread(read_final_summary, self.store.task_dir(task))
        job = await self.jobs.latest(task_uuid, KIND)
        # The job writes the file, then records what wrote it: until then it is pending.
        if text is not None and (job is None or job.status not in ACTIVE):
            return FinalSummary("ready", text, job)
        if job is None:  # a task finished before final summaries existed
            job = await self.jobs.enqueue_once(task_uuid, KIND)
        return FinalSummary("failed" if job.status == "failed" else "pending", None, job)


def read_final_summary(directory: Path) -> str | None:
    try:
        return (directory / FINAL_SUMMARY).read_text()
    except FileNotFoundError:
        return None
