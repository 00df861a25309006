"""Queueing a job once per context: asking again while it is queued or running finds it."""

import asyncio

import pytest

from app.db.engine import open_database
from app.jobs.queue import JobQueue
from tests.support.database import sqlite_write_lock_held


@pytest.mark.sqlite_only  # PostgreSQL locks rows: a writer waits for no other
async def test_asking_again_for_a_queued_job_does_not_wait_for_the_write_lock(
    task_and_db: tuple[str, str],
) -> None:
    """A context over its budget asks for its condense on every append until the condense is
    done: while another process holds SQLite's write lock, the ask finds the queued job at
    once rather than waiting for the lock."""
    task_uuid, url = task_and_db
    db = open_database(url)
    try:
        queue = JobQueue(db, max_attempts=2, lease_s=60)
        queued = await queue.enqueue_once(task_uuid, "condense")
        async with sqlite_write_lock_held(url):
            again = await asyncio.wait_for(queue.enqueue_once(task_uuid, "condense"), 5)
        assert again.id == queued.id
        assert len(await queue.list(task_uuid=task_uuid, status=None, limit=10)) == 1
    finally:
        await db.dispose()
