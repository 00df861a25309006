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


async def test_two_processes_asking_at_once_queue_one_job(task_and_db: tuple[str, str]) -> None:
    """Two processes' engines ask for the same context's condense at the same moment, again
    and again: each time one job is queued, which both find. (On SQLite the write lock orders
    them; on PostgreSQL a lock for the context's kind of job does.)"""
    task_uuid, url = task_and_db
    databases = [open_database(url) for _ in range(2)]
    try:
        queues = [JobQueue(db, max_attempts=2, lease_s=60) for db in databases]
        for _ in range(10):
            asked = await asyncio.gather(*(q.enqueue_once(task_uuid, "condense") for q in queues))
            assert asked[0].id == asked[1].id
            active = await queues[0].list(task_uuid=task_uuid, status="queued", limit=10)
            assert [job.id for job in active] == [asked[0].id]
            claimed = await queues[0].claim()
            assert claimed is not None
            await queues[0].finish(claimed, "succeeded", result={})
    finally:
        for db in databases:
            await db.dispose()
