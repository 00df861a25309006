"""Shared helpers for the API behaviour tests."""

import json
from pathlib import Path
from typing import Any

import httpx

from app.storage.layout import LOCATIONS
from tests.conftest import task_body

DEFAULT_KEY: dict[str, str] = {
    "task_source": "github",
    "owner": "notfolder",
    "repo": "coding_agent",
    "task_type": "issue",
    "task_id": "27",
}


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is `status` in the one error shape with `code`; returns its details."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    details: dict[str, Any] = body["error"]["details"]
    assert isinstance(details, dict)
    return details


def key(**overrides: str) -> dict[str, str]:
    """A task key: the default one with some fields replaced."""
    return DEFAULT_KEY | overrides


async def create_task(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    """POST /tasks with task_body(**overrides); asserts 201 and returns the task."""
    response = await client.post("/tasks", json=task_body(**overrides))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def windowed_task(
    client: httpx.AsyncClient, window: int, max_output_tokens: int
) -> tuple[str, int]:
    """A task with this window and output reserve; returns its uuid and its budget
    (window * (1 - CONTEXT_BUFFER 0.1) - reserve, SPEC §6)."""
    created = await create_task(client, context_length=window, max_output_tokens=max_output_tokens)
    return created["uuid"], int(window * 0.9) - max_output_tokens


def locations(context_dir: Path, task_uuid: str) -> list[str]:
    """Every location (running, paused, completed, .staging, .trash) holding the task's dir."""
    return [loc for loc in LOCATIONS if (context_dir / loc / task_uuid).is_dir()]


def paths_naming(context_dir: Path, task_uuid: str) -> list[Path]:
    """Every file or directory under CONTEXT_DIR whose name mentions the task's uuid."""
    return sorted(context_dir.rglob(f"*{task_uuid}*"))


def task_dir(context_dir: Path, task_uuid: str) -> Path:
    """The one directory of a task; fails if it is missing or in several places."""
    found = locations(context_dir, task_uuid)
    assert len(found) == 1, found
    return context_dir / found[0] / task_uuid


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, parsed."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
