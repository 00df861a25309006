"""The app's routes, read from its own OpenAPI schema (so a route added later is swept too), a
body each would accept, and what a call of one came to."""

from functools import cache
from typing import Any

import httpx

from app.config import Settings
from app.main import create_app
from tests.support.errors import assert_error
from tests.support.tasks import task_body

# A body each route would accept, so a refusal is the key's or the path's doing, not the body's.
# Routes not listed are sent without one.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/tasks"): task_body(),
    ("POST", "/tasks/{uuid}/fail"): {"error_message": "boom"},
    ("POST", "/tasks/{uuid}/messages"): {"role": "user", "content": "Fix the bug in a.py"},
    ("POST", "/tasks/{uuid}/compress"): {"strategy": "truncate"},
    ("POST", "/tasks/{uuid}/rewind"): {"to_seq": 2},
    ("POST", "/tasks/{uuid}/tools"): {"tool": "read_file", "args": {"path": "a.py"}},
    ("POST", "/tasks/{uuid}/planning"): {"plan_type": "initial", "plan_content": "1. Read a.py"},
    ("POST", "/tasks/{uuid}/threads"): {"label": "sub-agent"},
    ("POST", "/tasks/{uuid}/threads/{thread_id}/end"): {"generate_chronicle": False},
    ("POST", "/tasks/{uuid}/threads/{thread_id}/abort"): {"generate_chronicle": False},
    ("POST", "/maintenance/cleanup"): {"older_than_days": 0},
}

Route = tuple[str, str]  # method, path template


@cache
def schema_routes() -> tuple[Route, ...]:
    """Every (method, path template) of the app, from the schema of an app without keys (the
    one that serves it; the routes are the same either way)."""
    paths: dict[str, dict[str, Any]] = create_app(Settings()).openapi()["paths"]
    return tuple(sorted((method.upper(), path) for path, ops in paths.items() for method in ops))


def task_routes() -> list[Route]:
    """Every route about one task: /tasks/{uuid} and everything under it."""
    return [(m, p) for m, p in schema_routes() if p.startswith("/tasks/{uuid}")]


def creates_its_task(path: str) -> bool:
    """A proxy route under a task's own base URL: a uuid of no task is the task its first
    request creates, not a 404 (``/v1/models`` needs no task at all)."""
    return path.startswith("/tasks/{uuid}/v1/")


def outcome(response: httpx.Response) -> str:
    """ "<status>" for a success, "<status> <code>" for an error (checked to be in the one error
    shape), with "[<WWW-Authenticate>]" after a 401."""
    if response.status_code < 400:
        return str(response.status_code)
    if not response.headers.get("content-type", "").startswith("application/json"):
        return f"{response.status_code} not JSON: {response.text[:200]}"
    code = response.json()["error"]["code"]
    assert_error(response, response.status_code, code)
    if response.status_code == 401:
        return f"401 {code} [{response.headers.get('www-authenticate')}]"
    return f"{response.status_code} {code}"
