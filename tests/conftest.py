"""Fixtures: the real app (real SQLite or PostgreSQL, real files in a temp dir) over httpx's
ASGI transport.

With TEST_DATABASE_URL naming a PostgreSQL server (`make test-postgres`), every test gets a
database of its own there through DATABASE_URL, which Settings, the CLI and the uvicorn processes
of the end-to-end tests all read; without it DATABASE_URL is unset and each context directory
holds its own SQLite file.
"""

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from tests.support.lifespan import lifespan_of
from tests.support.postgres import PostgresDatabases

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus" / "trajectories"
SCHEMAS = SHARED / "schemas"


def task_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task_key": {
            "task_source": "github",
            "owner": "notfolder",
            "repo": "coding_agent",
            "task_type": "issue",
            "task_id": "27",
        },
        "user": "notfolder",
        "llm_provider": "openai",
        "model": "gpt-4o",
        "context_length": 128000,
        "max_output_tokens": 4096,
    }
    body.update(overrides)
    return body


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


@pytest.fixture(autouse=True)
def database_url(
    postgres: PostgresDatabases | None,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The test's own database URL in DATABASE_URL ("" for SQLite in the context directory)."""
    if postgres is None:
        monkeypatch.delenv("DATABASE_URL", raising=False)
        yield ""
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("SQLite only")
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


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with these settings (lifespan included), and a client for it."""
    async with serving(create_app(settings)) as client:
        yield client


@asynccontextmanager
async def serving(application: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of this app, its lifespan run around it."""
    async with lifespan_of(application) as started:
        transport = httpx.ASGITransport(app=started)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


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
async def task(client: httpx.AsyncClient) -> dict[str, Any]:
    """A running task with a system prompt."""
    response = await client.post("/tasks", json=task_body(system_prompt="You are a coding agent."))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def snapshot_dir(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (for 'nothing was written' checks)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("tasks.db") and p.suffix != ".lock"
    }
