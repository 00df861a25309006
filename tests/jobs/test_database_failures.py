"""A job's bookkeeping that the database fails now and then (a write lock held past its wait, a
connection lost): a renewal that failed is tried again before the lease runs out, so no other
run takes the job while this one works; a run's end that could not be written is written
again, never taken for the job's own failure (a job that did its work is not marked failed,
nor run twice)."""

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from app.db.engine import Database
from app.db.models import Job
from app.jobs.queue import JobQueue
from app.jobs.runner import JobRunner

LEASE_S = 0.6  # renewed every third of it while a job runs


@contextmanager
def database_fails_once(db: Database, statement: str) -> Iterator[list[str]]:
    """The next statement holding ``statement`` fails as a locked database fails it; yields
    the statements failed."""
    failed: list[str] = []

    def fail(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if statement in sql and not failed:
            failed.append(sql)
            raise OperationalError(sql, None, Exception("database is locked"))

    engine = db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", fail)
    try:
        yield failed
    finally:
        event.remove(engine, "before_cursor_execute", fail)


async def test_a_renewal_the_database_failed_is_tried_again_and_the_job_stays_this_runs(
    task_database: tuple[Database, str],
) -> None:
    database, task_uuid = task_database
    queue = JobQueue(database, max_attempts=3, lease_s=LEASE_S)
    release, runs = asyncio.Event(), []

    async def handler(job: Job) -> dict[str, Any]:
        runs.append(job.attempts)
        await release.wait()
        return {}

    runner = JobRunner(queue, {"condense": handler}, poll_s=3600, backoff_s=0, concurrency=1)
    with database_fails_once(database, "SET lease_until=") as failed:
        job = await queue.enqueue_once(task_uuid, "condense")
        await runner.start()
        await asyncio.sleep(LEASE_S * 3)
        assert failed  # a renewal failed...
        assert await JobQueue(database, max_attempts=3, lease_s=LEASE_S).claim() is None
        release.set()  # ...and no other run could take the job meanwhile
        await asyncio.sleep(LEASE_S / 2)
    await runner.stop()
    [row] = await queue.list(task_uuid=task_uuid, status=None, limit=10)
    assert (row.id, row.status, row.attempts) == (job.id, "succeeded", 1)
    assert runs == [1]


async def test_a_run_whose_end_the_database_failed_to_record_is_recorded_again(
    task_database: tuple[Database, str],
) -> None:
    """Its one attempt did the work: it is recorded as succeeded, not failed, and the work is
    done once."""
    database, task_uuid = task_database
    queue = JobQueue(database, max_attempts=1, lease_s=LEASE_S)
    done = asyncio.Event()
    runs = []

    async def handler(job: Job) -> dict[str, Any]:
        runs.append(job.attempts)
        return {"summary": "written"}

    runner = JobRunner(queue, {"condense": handler}, poll_s=3600, backoff_s=0, concurrency=1)
    with database_fails_once(database, "result=") as failed:
        job = await queue.enqueue_once(task_uuid, "condense")
        await runner.start()
        for _ in range(50):
            [row] = await queue.list(task_uuid=task_uuid, status=None, limit=10)
            if row.status in ("succeeded", "failed", "skipped"):
                done.set()
                break
            await asyncio.sleep(0.1)
        assert failed
    await runner.stop()
    assert done.is_set()
    assert (row.id, row.status, row.result, row.attempts) == (
        job.id,
        "succeeded",
        {"summary": "written"},
        1,
    )
    assert runs == [1]
