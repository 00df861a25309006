"""Stopping the job runner: running jobs are cancelled, and one that will not end in time is
left behind (its lease brings it back) rather than holding up the shutdown."""

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from app.db.engine import Database
from app.db.models import Job
from app.jobs.queue import JobQueue
from app.jobs.runner import Handler, JobRunner

LEASE_S = 0.5  # renewed every third of it while a job runs


@pytest.fixture
def queue(task_database: tuple[Database, str]) -> tuple[JobQueue, str]:
    database, task_uuid = task_database
    return JobQueue(database, max_attempts=3, lease_s=LEASE_S), task_uuid


def long_job(started: asyncio.Event, when_cancelled: Callable[[], Awaitable[object]]) -> Handler:
    """A job handler that runs until it is cancelled, and then awaits ``when_cancelled``
    (which re-raises the cancellation, or swallows it)."""

    async def handler(job: Job) -> dict[str, object]:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await when_cancelled()
        return {}

    return handler


async def run_until_started(
    queue: JobQueue, task_uuid: str, when_cancelled: Callable[[], Awaitable[object]]
) -> tuple[JobRunner, Job]:
    started = asyncio.Event()
    handler = long_job(started, when_cancelled)
    runner = JobRunner(queue, {"condense": handler}, poll_s=3600, backoff_s=0, concurrency=1)
    job = await queue.enqueue_once(task_uuid, "condense")
    await runner.start()
    await asyncio.wait_for(started.wait(), 30)
    return runner, job


async def test_a_running_job_is_cancelled(queue: tuple[JobQueue, str]) -> None:
    jobs, task_uuid = queue
    cancelled = asyncio.Event()

    async def reraise() -> None:
        cancelled.set()
        raise asyncio.CancelledError

    runner, job = await run_until_started(jobs, task_uuid, reraise)
    await runner.stop()
    assert cancelled.is_set()
    [row] = await jobs.list(task_uuid=task_uuid, status=None, limit=10)
    # Not finished by the stopping worker: its lease brings it back to another one.
    assert (row.id, row.status, row.attempts) == (job.id, "running", 1)


async def test_a_job_that_ignores_its_cancellation_does_not_hold_up_the_stop(
    queue: tuple[JobQueue, str], caplog: pytest.LogCaptureFixture
) -> None:
    jobs, task_uuid = queue
    release = asyncio.Event()
    # Swallows the cancellation until the test lets it go.
    runner, job = await run_until_started(jobs, task_uuid, release.wait)
    began = time.monotonic()
    await runner.stop(grace_s=0.3)
    assert time.monotonic() - began < 20  # not stuck: the grace, give or take a busy machine
    assert "1 job task(s) still running 0.3 s after their cancellation" in caplog.text
    assert f"job {job.id} (condense)" in caplog.text
    # Its lease is no longer renewed: another worker gets the job once the lease runs out.
    deadline = time.monotonic() + 60
    while (again := await jobs.claim()) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (again.id, again.attempts) == (job.id, 2)
    release.set()  # the run left behind goes on to its end, and records nothing
    while "another run took it over" not in caplog.text:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    [row] = await jobs.list(task_uuid=task_uuid, status=None, limit=10)
    assert (row.status, row.attempts) == ("running", 2)
    await jobs.finish(again, "succeeded")


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_a_wake_up_as_the_runner_stops_does_not_keep_it_claiming(
    queue: tuple[JobQueue, str], caplog: pytest.LogCaptureFixture, turns: int
) -> None:
    """The claim loop, idle, is woken (a job ended or was queued) just as it is cancelled: it
    stops all the same (asyncio.wait_for on Python 3.11 dropped such a cancellation)."""
    jobs, _ = queue
    runner = JobRunner(jobs, {}, poll_s=3600, backoff_s=0, concurrency=1)
    await runner.start()
    await asyncio.sleep(0.2)  # the loop found nothing to claim and waits to be woken
    jobs.notify()
    for _ in range(turns):
        await asyncio.sleep(0)
    await runner.stop(grace_s=5)
    assert "left behind" not in caplog.text
