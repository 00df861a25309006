"""Putting jobs in the table and reading them back."""

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.engine import Database
from app.db.models import Job
from app.errors import ErrorCode, NotFound, TaskNotFound
from app.storage.locks import advisory_key

log = logging.getLogger(__name__)

ACTIVE = ("queued", "running")
_XACT_LOCK = text("SELECT pg_advisory_xact_lock(:key)")


class JobDeferred(Exception):
    """Raised by a handler whose job cannot be done yet (it waits for something outside it):
    the job is queued again after the runner's backoff, and the attempt does not count."""


class JobQueue:
    def __init__(self, db: Database, *, max_attempts: int, lease_s: float) -> None:
        self.db = db
        self.max_attempts = max_attempts
        self.lease_s = lease_s
        self.listeners: list[Any] = []  # callables woken when a job is queued here

    def new(
        self,
        task_uuid: str,
        kind: str,
        *,
        params: dict[str, Any] | None = None,
        max_attempts: int | None = None,
        thread_id: int = 0,
    ) -> Job:
        """A queued job, to add to a session (so it commits with the change that caused it);
        call ``notify`` after the commit."""
        now = datetime.now(UTC)
        return Job(
            task_uuid=task_uuid,
            thread_id=thread_id,
            kind=kind,
            status="queued",
            attempts=0,
            max_attempts=max_attempts or self.max_attempts,
            params=params,
            not_before=now,
            created_at=now,
        )

    def notify(self) -> None:
        """Wake the runners of this process: a job was queued."""
        for wake in self.listeners:
            wake()

    async def enqueue_once(self, task_uuid: str, kind: str, thread_id: int = 0) -> Job:
        """Queue a job unless one of this kind is already queued or running for the context;
        TaskNotFound if the task is gone (deleted since whatever called for the job).

        A context over its budget asks again on every append until its condense is done: a
        read finds that job without the write transaction (on SQLite, the database's write
        lock, which another writer may hold for a while)."""
        async with self.db.statements() as session:
            existing = await session.scalar(_active_job(task_uuid, kind, thread_id))
        # A running job found here may be finishing this moment, as one the transaction found
        # could: a context still over its budget asks again at its next append.
        if existing is not None:
            return existing
        try:
            async with self.db.transaction() as session:
                if self.db.engine.dialect.name == "postgresql":
                    # Two processes must not both find none and both insert: on SQLite the
                    # transaction's write lock orders them; here a lock for the context's
                    # kind of job does, until the commit.
                    key = advisory_key(f"job\x00{task_uuid}\x00{thread_id}\x00{kind}")
                    await session.execute(_XACT_LOCK, {"key": key})
                existing = await session.scalar(_active_job(task_uuid, kind, thread_id))
                if existing is not None:
                    return existing
                job = self.new(task_uuid, kind, thread_id=thread_id)
                session.add(job)
        except IntegrityError:  # the task's row is gone: the only key a job refers to
            raise TaskNotFound(task_uuid) from None
        self.notify()
        return job

    async def active(self, task_uuid: str, kind: str, thread_ids: list[int]) -> bool:
        """Whether a job of this kind is queued or running for one of these contexts."""
        async with self.db.reader() as session:
            found = await session.scalar(
                select(Job.id)
                .where(
                    Job.task_uuid == task_uuid,
                    Job.kind == kind,
                    Job.thread_id.in_(thread_ids),
                    Job.status.in_(ACTIVE),
                )
                .limit(1)
            )
        return found is not None

    async def latest(self, task_uuid: str, kind: str) -> Job | None:
        """The newest job of this kind for the task."""
        async with self.db.reader() as session:
            return await session.scalar(
                select(Job)
                .where(Job.task_uuid == task_uuid, Job.kind == kind)
                .order_by(Job.id.desc())
                .limit(1)
            )

    async def get(self, job_id: int) -> Job:
        async with self.db.reader() as session:
            job = await session.get(Job, job_id)
        if job is None:
            raise NotFound(f"job {job_id} does not exist", code=ErrorCode.JOB_NOT_FOUND)
        return job

    async def list(self, *, task_uuid: str | None, status: str | None, limit: int) -> list[Job]:
        query: Select[tuple[Job]] = select(Job)
        if task_uuid is not None:
            query = query.where(Job.task_uuid == task_uuid)
        if status is not None:
            query = query.where(Job.status == status)
        async with self.db.reader() as session:
            return list(await session.scalars(query.order_by(Job.id.desc()).limit(limit)))

    async def claim(self) -> Job | None:
        """Take the oldest due job: mark it running, with a lease, in one transaction.

        A running job whose lease ran out lost its worker (killed, or its host gone): it is due
        again, for any worker of any process; after its last attempt it fails instead.
        """
        # A runner polls every few seconds and mostly finds nothing: a one-statement read
        # says so without the write transaction (on SQLite the database's write lock, which
        # appends' bookkeeping and every other writer would wait for).
        async with self.db.statements() as session:
            if await session.scalar(select(Job.id).where(_due(datetime.now(UTC))).limit(1)) is None:
                return None
        async with self.db.transaction() as session:
            # The time once the transaction is ours: a claim that waited for the database
            # longer than a lease would otherwise hand out a lease already over, and the next
            # claim would take the job from its new run.
            now = datetime.now(UTC)
            await session.execute(
                update(Job)
                .where(_lease_over(now), Job.attempts >= Job.max_attempts)
                .values(
                    status="failed",
                    lease_until=None,
                    finished_at=now,
                    error="its worker stopped during the last attempt",
                )
            )
            job = await session.scalar(
                select(Job)
                .where(_due(now))
                .order_by(Job.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if job is None:
                return None
            if job.status == "running":
                log.warning("job %d (%s): its worker stopped; running it again", job.id, job.kind)
            job.status = "running"
            job.attempts += 1
            job.started_at = now
            job.lease_until = now + timedelta(seconds=self.lease_s)
        return job

    def _still_ours(self, job: Job) -> ColumnElement[bool]:
        """The job as this run claimed it: once its lease ran out and another run claimed it
        (attempts moved on), the old run may neither renew nor record anything."""
        return and_(Job.id == job.id, Job.status == "running", Job.attempts == job.attempts)

    async def renew(self, job: Job) -> bool:
        """Extend the run's lease; False when the job is no longer this run's."""
        async with self.db.transaction() as session:
            until = datetime.now(UTC) + timedelta(seconds=self.lease_s)  # from now: held
            result = await session.execute(
                update(Job).where(self._still_ours(job)).values(lease_until=until)
            )
        return bool(getattr(result, "rowcount", 0))

    async def finish(
        self,
        job: Job,
        status: str,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        retry_at: datetime | None = None,
        counted: bool = True,
    ) -> None:
        """Record how a run ended; with ``retry_at`` the job is queued again (``counted``
        False: that run was no attempt)."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {"status": status, "error": error, "lease_until": None}
        if not counted:
            values["attempts"] = Job.attempts - 1
        if retry_at is not None:
            values["not_before"] = retry_at
        else:
            values |= {"result": result, "finished_at": now}
        async with self.db.transaction() as session:
            updated = await session.execute(
                update(Job).where(self._still_ours(job)).values(**values)
            )
        if not getattr(updated, "rowcount", 0):
            log.warning("job %d: its lease ran out and another run took it over", job.id)


async def count_active(session: AsyncSession) -> dict[tuple[str, str], int]:
    """Queued and running jobs by (kind, status)."""
    rows = await session.execute(
        select(Job.kind, Job.status, func.count())
        .where(Job.status.in_(ACTIVE))
        .group_by(Job.kind, Job.status)
    )
    return {(str(kind), str(status)): int(n) for kind, status, n in rows}


def _lease_over(now: datetime) -> ColumnElement[bool]:
    """A running job whose worker stopped renewing its lease."""
    return and_(Job.status == "running", Job.lease_until < now)


def _due(now: datetime) -> ColumnElement[bool]:
    """A job a runner may take: queued and due, or running with its lease over."""
    return or_(and_(Job.status == "queued", Job.not_before <= now), _lease_over(now))


def _active_job(task_uuid: str, kind: str, thread_id: int) -> Select[Job]:
    return select(Job).where(
        Job.task_uuid == task_uuid,
        Job.thread_id == thread_id,
        Job.kind == kind,
        Job.status.in_(ACTIVE),
    )
