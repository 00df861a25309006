"""Fixtures of the job tests: a task, and the database the test's own queues work on."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from app.db.engine import Database, open_database
from tests.support.app import running_app
from tests.support.tasks import create_task


@pytest.fixture
async def task_and_db(context_dir: Path) -> AsyncIterator[tuple[str, str]]:
    """A task (the app's own runner polls once an hour, so it leaves our jobs alone) and the
    database URL, for queues of the test's own."""
    settings = Settings(context_dir=context_dir, job={"poll_s": 3600})
    async with running_app(settings) as client:
        yield (await create_task(client))["uuid"], settings.effective_database_url


@pytest.fixture
async def task_database(task_and_db: tuple[str, str]) -> AsyncIterator[tuple[Database, str]]:
    """The database open for the test's own queues, and the task."""
    task_uuid, url = task_and_db
    database = open_database(url)
    try:
        yield database, task_uuid
    finally:
        await database.dispose()
