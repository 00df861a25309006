"""Runs due jobs in the background of one service process.

Jobs are claimed in a transaction (so each runs once, whichever process claims it), leased and
renewed while they run; a job whose process died is requeued when its lease runs out. A failed
job is retried with exponential backoff, then marked failed with its error; a deferred one
(:class:`app.jobs.queue.JobDeferred`) waits one backoff and keeps its attempts.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

from app.db.models import Job
from app.errors import Conflict, NotFound
from app.jobs.queue import JobDeferred, JobQueue
from app.observability.logs import TASK_UUID

log = logging.getLogger(__name__)

Handler = Callable[[Job], Awaitable[dict[str, Any]]]

# How long shutdown waits for cancelled jobs to unwind.
STOP_GRACE_S = 10.0
# How many times a run's end is written before it is left to its lease (a beat of it apart).
RECORD_ATTEMPTS = 3


class JobRunner:
    def __init__(
        self,
        queue: JobQueue,
        handlers: dict[str, Handler],
        *,
        poll_s: float,
        backoff_s: float,
        concurrency: int,
    ) -> None:
        self.queue = queue
        self.handlers = handlers
        self.poll_s = poll_s
        self.backoff_s = backoff_s
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = False
        queue.listeners.append(self._wake.set)

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run_forever(), name="job claim loop")

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Cancel the claim loop and the running jobs, and wait up to ``grace_s`` for them to
        end. A job that does not end by then is left behind, so that shutdown never hangs on
        it: its lease runs out and another worker runs it again."""
        self._stopping = True  # no more claims, and no more lease renewals
        tasks = {t for t in (self._loop, *self._running) if t is not None}
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        ended, stuck = await asyncio.wait(tasks, timeout=grace_s)
        for task in ended:
            if not task.cancelled() and (error := task.exception()) is not None:
                log.error("%s ended with an error while stopping", task.get_name(), exc_info=error)
        if stuck:
            log.error(
                "%d job task(s) still running %g s after their cancellation; left behind: %s",
                len(stuck),
                grace_s,
                ", ".join(sorted(task.get_name() for task in stuck)),
            )

    async def _run_forever(self) -> None:
        while not self._stopping:
            await self._slots.acquire()
            try:
                job = await self.queue.claim()
            except Exception:
                log.exception("could not claim a job")
                job = None
            if job is None:
                self._slots.release()
                # Not asyncio.wait_for: on Python 3.11 it drops a cancellation that arrives as
                # the event is set (CPython gh-86296), and this loop would outlive stop().
                with suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_s):
                        await self._wake.wait()
                self._wake.clear()
                continue
            task = asyncio.create_task(self._run(job), name=f"job {job.id} ({job.kind})")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, job: Job) -> None:
        # Lines logged by the job are about its task; _run is an asyncio task of its own, so
        # the value lasts exactly as long as the job (and its heartbeat inherits it).
        TASK_UUID.set(job.task_uuid)
        heartbeat = asyncio.create_task(self._heartbeat(job))
        try:
            await self._run_and_record(job)
        except Exception:
            # The run ended but the database did not take how (locked, gone, full): the job
            # stays this run's until its lease runs out, then runs again. That is never taken
            # for the handler's own failure: a job that did its work is not marked failed, nor
            # queued again at once.
            log.exception(
                "job %d (%s, task %s): how its run ended could not be recorded; it runs again "
                "once its lease runs out",
                job.id,
                job.kind,
                job.task_uuid,
            )
        finally:
            heartbeat.cancel()
            self._slots.release()
            self._wake.set()

    async def _run_and_record(self, job: Job) -> None:
        """Run the job's handler and record how it ended (the recording's own failure is the
        caller's to handle)."""
        try:
            result = await self.handlers[job.kind](job)
        except (Conflict, NotFound) as exc:  # the task moved on (finished, deleted)
            await self._finish(job, "skipped", result={"skipped": exc.code}, error=str(exc))
        except JobDeferred as exc:
            retry_at = datetime.now(UTC) + timedelta(seconds=self.backoff_s)
            error = f"{type(exc).__name__}: {exc}"
            await self._finish(job, "queued", error=error, retry_at=retry_at, counted=False)
            log.info("job %d (task %s) deferred: %s", job.id, job.task_uuid, exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if job.attempts < job.max_attempts:
                delay = self.backoff_s * 2 ** (job.attempts - 1)
                retry_at = datetime.now(UTC) + timedelta(seconds=delay)
                await self._finish(job, "queued", error=error, retry_at=retry_at)
                log.warning(
                    "job %d (task %s) failed, retry in %.1fs: %s",
                    job.id,
                    job.task_uuid,
                    delay,
                    error,
                )
            else:
                await self._finish(job, "failed", error=error)
                log.error("job %d (task %s) failed for good: %s", job.id, job.task_uuid, error)
        else:
            status = "skipped" if result.get("skipped") else "succeeded"
            await self._finish(job, status, result=result)
            log.info("job %d (%s, task %s): %s", job.id, job.kind, job.task_uuid, status)

    async def _finish(self, job: Job, status: str, **how: Any) -> None:
        """:meth:`JobQueue.finish`, tried again while the database fails it (a write lock held
        past its wait, a connection lost): the heartbeat keeps the lease meanwhile."""
        for attempt in range(1, RECORD_ATTEMPTS + 1):
            try:
                await self.queue.finish(job, status, **how)
                return
            except Exception:
                if attempt == RECORD_ATTEMPTS:
                    raise
                log.warning("job %d: how its run ended could not be recorded; trying again", job.id)
                await asyncio.sleep(self.queue.lease_s / 3)

    async def _heartbeat(self, job: Job) -> None:
        # Three beats to a lease: a renewal the database failed (locked, a connection lost)
        # is tried again at the next one, before the lease runs out and another run may take
        # the job while this one still works.
        while True:
            await asyncio.sleep(self.queue.lease_s / 3)
            if self._stopping:
                return  # a job left behind by stop(): its lease runs out
            try:
                still_ours = await self.queue.renew(job)
            except Exception:
                log.warning("job %d: its lease could not be renewed; trying again", job.id)
                continue
            if not still_ours:
                return  # taken over: finish() will not record this run either
