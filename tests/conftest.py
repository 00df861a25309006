"""Fixtures: the real app (real SQLite, real files in a temp dir) over httpx's ASGI transport."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app

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


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    return tmp_path / "contexts"


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, database_url="")


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with these settings (lifespan included), and a client for it."""
    application = create_app(settings)
    async with LifespanManager(application) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(settings)
    async with LifespanManager(application) as manager:
        yield manager.app  # type: ignore[misc]


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
