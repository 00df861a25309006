"""Chronicles: a thread's summary, written by a job once it ends or is aborted.

The job is queued in the transaction that ends the thread, so a restart finishes it. It
summarises the thread's whole history (its messages.jsonl) with the thread's chronicle_prompt
or the default, stores the chronicle on the thread's row, then embeds it in the parent's
context as a system message (:func:`embedding`). Each step is idempotent: a rerun finds the
stored chronicle (no second LLM call) and the embedding's idempotency key (no second message).

On the job's last attempt a chat backend that keeps failing gives way to the extractive
digest, as final summaries do: an ended thread always gets its chronicle.
"""

import logging
from typing import Any

from app.budgets.windows import descendants_of
from app.config import EXTRACTIVE
from app.context.files import History
from app.context.store import SERVICE_KEY, AfterCommit, ContextStore
from app.db.models import Job, Thread
from app.errors import Conflict, ErrorCode
from app.jobs.queue import JobDeferred, JobQueue
from app.llm.errors import LLMError
from app.summaries.summarizer import Summarizer
from app.threads import repository

log = logging.getLogger(__name__)

KIND = "chronicle"

DEFAULT_PROMPT = """\
You are writing the chronicle of a piece of delegated work: a sub-conversation that was \
started to do one job and has now ended. The conversation that started it will continue from \
this chronicle alone, so it must say:
  1. Goal: what the thread was asked to do.
  2. Outcome: what was achieved, and whether the goal was met.
  3. Work done: changes made, files created or modified, commands run and their results.
  4. Findings: what was learned that the parent conversation needs to know.
  5. Open ends: what is left undone, problems not solved, and suggested next steps.

Output only the chronicle, without any additional commentary."""
PARTIAL = (
    "\n\nThis thread was aborted before it finished: say what was done and what was left undone."
)


class EmbeddingDeferred(JobDeferred):
    """The parent waits for tool results: nothing may come between them. Tried again later,
    for as long as it takes (the wait is not a failed attempt)."""


class ChronicleWriter:
    def __init__(
        self,
        store: ContextStore,
        summarizer: Summarizer,
        jobs: JobQueue,
        condense_trigger: AfterCommit,
        *,
        max_tokens: int,
    ) -> None:
        self.store = store
        self.summarizer = summarizer
        self.jobs = jobs
        self.condense_trigger = condense_trigger  # an embedding may cross the threshold
        self.max_tokens = max_tokens

    async def write(self, job: Job) -> dict[str, Any]:
        """The job handler."""
        async with self.store.locked(job.task_uuid, job.thread_id) as locked:
            thread = locked.thread
            assert thread is not None
            chronicle = thread.chronicle_summary
            if chronicle is None:
                below = descendants_of(thread.thread_id, locked.threads)
                if below and await self.jobs.active(job.task_uuid, KIND, below):
                    # Their chronicles land in this thread first: this one tells of them.
                    raise JobDeferred("threads under it are still being chronicled")
                head = await self.store.recovered_head(locked)
                backend = await self.store.summary_backend(locked)
                handle = await self.store.open_messages(locked)
        result: dict[str, Any] = {"thread_id": thread.thread_id}
        if chronicle is None:
            prompt = (thread.chronicle_prompt or DEFAULT_PROMPT) + (
                PARTIAL if thread.status == "aborted" else ""
            )
            try:
                chronicle, result["summarizer"] = await self._summarize(
                    job, History(handle, head.messages_bytes), backend, prompt
                )
            finally:
                handle.close()
            chronicle = await self._keep(job, chronicle)
            log.info(
                "thread %d: chronicle written (%d characters)", thread.thread_id, len(chronicle)
            )
        result["embedded"] = await self._embed(job.task_uuid, thread, chronicle)
        return result

    async def _keep(self, job: Job, chronicle: str) -> str:
        """Store the chronicle unless a run whose lease lapsed stored one first; the stored
        one (what is embedded must not change between runs)."""
        async with self.store.db.transaction() as session:
            stored = await repository.keep_chronicle(
                session, job.task_uuid, job.thread_id, chronicle
            )
        return stored or chronicle

    async def _summarize(
        self, job: Job, history: History, backend: str | None, prompt: str
    ) -> tuple[str, str]:
        """The chronicle and who wrote it; the extractive digest after a last failure."""
        if backend is not None and backend not in self.summarizer.backends:
            backend = None  # renamed or removed since: the default summariser
        try:
            text = await self.summarizer.summarize(
                iter(history), backend, prompt=prompt, max_tokens=self.max_tokens
            )
            return text.strip(), self.summarizer.describe(backend)
        except LLMError as exc:
            if job.attempts < job.max_attempts:
                raise
            log.warning("thread %d: chronicle by the extractive digest: %s", job.thread_id, exc)
            text = await self.summarizer.summarize(
                iter(history), EXTRACTIVE, prompt=prompt, max_tokens=self.max_tokens
            )
            return text.strip(), f"{EXTRACTIVE} (after {exc.backend} failed)"

    async def _embed(self, task_uuid: str, thread: Thread, chronicle: str) -> bool | str:
        """The chronicle's embedding in the parent, ended or not (its chronicle is written
        after its children's: a parent ended with cascade, or right after its child, still
        gets theirs); True, or why it was not (the task finished)."""
        status = "completed" if thread.status == "completed" else "aborted"
        message = {
            "role": "system",
            "content": embedding(thread.label or f"#{thread.thread_id}", status, chronicle),
            "metadata": {"stelis_thread_id": thread.thread_id, "stelis_status": status},
        }
        async with self.store.locked(task_uuid, thread.parent_thread_id) as parent:
            task = parent.task
            if task.status == "paused":
                raise JobDeferred(f"task {task_uuid} is paused")
            if task.status != "running":
                log.info(
                    "thread %d: chronicle not embedded: task %s", thread.thread_id, task.status
                )
                return "task_not_writable"
            try:
                before = await self.store.recovered_head(parent)
                after, _ = await self.store.append_locked(
                    parent,
                    [message],
                    idempotency_key=f"{SERVICE_KEY}chronicle-{thread.thread_id}",
                    ended_parent=True,
                )
            except Conflict as exc:
                if exc.code == ErrorCode.TOOL_RESULTS_PENDING:
                    raise EmbeddingDeferred(str(exc)) from exc
                raise
        await self.condense_trigger(parent, before, after)
        return True


def embedding(label: str, status: str, chronicle: str) -> str:
    """The embedding, as the original thread design words it: '[Thread completed: label]', then
    the chronicle."""
    return f"[Thread {status}: {label}]\n\n## Chronicle\n{chronicle}"
