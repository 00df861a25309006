"""Fixtures: the real app (real SQLite or PostgreSQL, real files in a temp dir) over httpx's
ASGI transport.

With TEST_DATABASE_URL naming a PostgreSQL server (`make test-postgres`), every test gets a
database of its own there through DATABASE_URL, which Settings, the CLI and the uvicorn processes
of the end-to-end tests all read; without it DATABASE_URL is unset and each context directory
holds its own SQLite file.

Only fixtures live here; what tests share besides them is in tests/support.
"""

import gc
import os
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from app.summaries.processes import SummaryProcesses
from tests.support.lifespan import lifespan_of
from tests.support.postgres import PostgresDatabases
from tests.support.server import ServerPool
from tests.support.settings import IN_PROCESS_ENV
from tests.support.tasks import task_body


def pytest_configure(config: pytest.Config) -> None:
    for name, value in IN_PROCESS_ENV.items():  # why: tests/support/settings.py
        os.environ.setdefault(name, value)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What is alive once the tests are collected (the app's modules and libraries, the test
    modules) lives as long as the run: frozen, it is not walked again by each of the run's full
    collections, which free the apps the tests made. On the API, message and task tests that
    took a third off the time spent collecting garbage (24 s to 16 s of about 150 s)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases | None]:
    server_url = os.environ.get("TEST_DATABASE_URL", "")
    if not server_url:
        yield None
        return
    if not server_url.startswith("postgresql+asyncpg://"):
        pytest.exit(f"TEST_DATABASE_URL must be postgresql+asyncpg://..., not {server_url!r}")
    databases = PostgresDatabases(server_url)
    databases.create_template()
    yield databases
    databases.drop_template()


# `make test` runs the SQLite and the PostgreSQL suites side by side, one per core, and says
# so in SIDE_BY_SIDE. A test marked database_agnostic then runs in one of them only, chosen by
# its id: this share of them on PostgreSQL, whose suite is otherwise the shorter (it runs such
# a test slower, a database each, so the share is below a half). On its own, the SQLite suite
# runs them all and the PostgreSQL suite none.
POSTGRES_SHARE_OF_AGNOSTIC = 0.25


def agnostic_runs_on_postgres(nodeid: str) -> bool:
    """Whether a database-agnostic test runs in the PostgreSQL suite (the two side by side)."""
    side_by_side = os.environ.get("SIDE_BY_SIDE") == "1"
    return side_by_side and zlib.crc32(nodeid.encode()) % 100 < POSTGRES_SHARE_OF_AGNOSTIC * 100


@pytest.fixture(autouse=True)
def database_url(
    postgres: PostgresDatabases | None,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The test's own database URL in DATABASE_URL ("" for SQLite in the context directory)."""
    agnostic = request.node.get_closest_marker("database_agnostic") is not None
    on_postgres = agnostic and agnostic_runs_on_postgres(request.node.nodeid)
    if postgres is None:
        if on_postgres:
            pytest.skip("the same on any database: run by the PostgreSQL suite beside this one")
        monkeypatch.delenv("DATABASE_URL", raising=False)
        yield ""
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("SQLite only")
    if agnostic and not on_postgres:
        pytest.skip("the same on any database: run on SQLite")
    url = postgres.create()
    monkeypatch.setenv("DATABASE_URL", url)
    yield url
    postgres.drop(url)


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    return tmp_path / "contexts"


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    async with lifespan_of(create_app(settings)) as started:
        yield started  # type: ignore[misc]


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http


@pytest.fixture
async def processes() -> AsyncIterator[SummaryProcesses]:
    """A pool of one of the service's CPU processes (started at its first call)."""
    pool = SummaryProcesses(1)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerPool]:
    """A pool of real uvicorn servers on one temp CONTEXT_DIR, all ended at teardown (pass or
    fail)."""
    pool = ServerPool(tmp_path)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
async def task(client: httpx.AsyncClient) -> dict[str, Any]:
    """A running task with a system prompt."""
    response = await client.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created
