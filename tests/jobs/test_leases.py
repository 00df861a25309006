"""Job leases: a running job whose worker died (its lease ran out) is claimed again by any
worker, at any time, not only at a start; the old run, should it still be alive, can neither
renew nor record anything; a job whose last attempt died fails instead of staying running."""

import asyncio

import pytest

from app.db.engine import open_database
from app.jobs.queue import JobQueue
from tests.support.database import sqlite_write_lock_held

LEASE_S = 0.2


async def test_an_expired_lease_is_claimed_again_and_the_old_run_is_fenced(
    task_and_db: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    task_uuid, url = task_and_db
    db = open_database(url)
    try:
        queue = JobQueue(db, max_attempts=3, lease_s=LEASE_S)
        job = await queue.enqueue_once(task_uuid, "condense")
        first = await queue.claim()
        assert first is not None
        assert (first.id, first.attempts) == (job.id, 1)
        assert await queue.claim() is None  # leased to the first run
        await asyncio.sleep(LEASE_S * 1.5)  # the first run's worker "died"

        second = await queue.claim()
        assert second is not None
        assert (second.id, second.attempts) == (job.id, 2)
        assert "its worker stopped; running it again" in caplog.text
        assert not await queue.renew(first)
        await queue.finish(first, "succeeded", result={"run": 1})  # ignored
        assert "another run took it over" in caplog.text
        assert await queue.renew(second)
        await queue.finish(second, "succeeded", result={"run": 2})

        [row] = await queue.list(task_uuid=task_uuid, status=None, limit=10)
        assert (row.status, row.result, row.attempts) == ("succeeded", {"run": 2}, 2)
    finally:
        await db.dispose()


async def test_a_job_whose_last_attempt_died_fails(task_and_db: tuple[str, str]) -> None:
    task_uuid, url = task_and_db
    db = open_database(url)
    try:
        queue = JobQueue(db, max_attempts=1, lease_s=LEASE_S)
        job = await queue.enqueue_once(task_uuid, "condense")
        assert await queue.claim() is not None
        await asyncio.sleep(LEASE_S * 1.5)
        assert await queue.claim() is None
        [row] = await queue.list(task_uuid=task_uuid, status=None, limit=10)
        assert (row.id, row.status, row.attempts) == (job.id, "failed", 1)
        assert row.error == "its worker stopped during the last attempt"
        assert row.finished_at is not None
    finally:
        await db.dispose()


@pytest.mark.sqlite_only  # PostgreSQL locks rows: a claim waits for no other writer
async def test_a_lease_runs_from_the_claim_not_from_the_wait_for_the_database(
    task_and_db: tuple[str, str],
) -> None:
    """A claim that waits for SQLite's write lock (another process writing, on a loaded host)
    longer than a lease still gets a whole lease: a lease already over would let the next
    claim take the job from the run that has just started."""
    task_uuid, url = task_and_db
    db = open_database(url)
    try:
        queue = JobQueue(db, max_attempts=2, lease_s=LEASE_S)
        await queue.enqueue_once(task_uuid, "condense")
        async with sqlite_write_lock_held(url):
            claiming = asyncio.create_task(queue.claim())
            await asyncio.sleep(LEASE_S * 3)
        job = await claiming
        assert job is not None
        assert await queue.claim() is None  # still leased to the first run
        assert await queue.renew(job)
        [row] = await queue.list(task_uuid=task_uuid, status=None, limit=10)
        assert (row.status, row.attempts) == ("running", 1)
    finally:
        await db.dispose()


@pytest.mark.sqlite_only  # PostgreSQL locks rows: a claim waits for no other writer
async def test_a_claim_that_finds_nothing_due_does_not_wait_for_the_write_lock(
    task_and_db: tuple[str, str],
) -> None:
    """A runner polls every few seconds and mostly finds nothing: while another process holds
    SQLite's write lock, such a claim answers at once (were it a write transaction, every
    other writer of the process would queue behind it on each poll)."""
    task_uuid, url = task_and_db
    db = open_database(url)
    try:
        queue = JobQueue(db, max_attempts=2, lease_s=60)
        assert await queue.claim() is None  # no job at all
        await queue.enqueue_once(task_uuid, "condense")
        assert await queue.claim() is not None
        async with sqlite_write_lock_held(url):
            assert await asyncio.wait_for(queue.claim(), 5) is None  # leased, not due
    finally:
        await db.dispose()
