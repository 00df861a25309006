"""Which task a proxied request names, and the windows of well-known models."""

from typing import Any

import pytest

from app.errors import AppError
from app.proxy.resolution import TaskRef, known_window, requested_window, task_ref
from app.task_key import TaskKey

pytestmark = pytest.mark.database_agnostic

UUID = "5f0c8a4e-8a43-4f0e-9d43-1a2b3c4d5e6f"
KEY_HEADERS = {
    "x-context-task-source": "github",
    "x-context-task-owner": "acme",
    "x-context-task-repo": "shop",
    "x-context-task-type": "issue",
    "x-context-task-id": "42",
}
KEY = TaskKey(task_source="github", owner="acme", repo="shop", task_type="issue", task_id="42")


def test_the_uuid_in_the_url_comes_first() -> None:
    other = "9a1f6b52-3c4d-4e5f-8a6b-7c8d9e0f1a2b"
    headers = {"x-context-task": other, **KEY_HEADERS, "x-context-user": "ada"}
    assert task_ref(headers, other, in_path=UUID) == TaskRef(UUID, KEY, "ada")


@pytest.mark.parametrize(
    ("headers", "user_field", "expected"),
    [
        ({"x-context-task": UUID.upper()}, None, TaskRef(UUID, None, None)),
        ({"x-context-task": UUID, **KEY_HEADERS}, None, TaskRef(UUID, KEY, None)),
        ({**KEY_HEADERS, "x-context-user": "ada"}, UUID, TaskRef(None, KEY, "ada")),
        ({}, UUID, TaskRef(UUID, None, None)),
        ({"x-context-user": "ada"}, UUID, TaskRef(UUID, None, "ada")),
        ({}, f"  {UUID.upper()} ", TaskRef(UUID, None, None)),
    ],
    ids=["uuid", "uuid-and-key", "key-before-body", "body-user", "body-user-and-user", "spaced"],
)
def test_the_task_a_request_names(
    headers: dict[str, str], user_field: Any, expected: TaskRef
) -> None:
    assert task_ref(headers, user_field) == expected


@pytest.mark.parametrize(
    ("headers", "user_field", "status", "code", "says"),
    [
        ({}, None, 400, "task_required", "X-Context-Task"),
        ({}, "ada", 400, "task_required", "X-Context-Task-Source"),
        ({"x-context-task": "42"}, None, 422, "validation_error", "must be a task uuid"),
        ({"x-context-task-source": "github"}, None, 422, "task_required", "X-Context-Task-Id"),
        ({**KEY_HEADERS, "x-context-task-id": "x" * 300}, None, 422, "validation_error", "task_id"),
    ],
    ids=["nothing", "user-not-a-uuid", "bad-uuid", "partial-key", "key-too-long"],
)
def test_a_request_naming_no_task_is_told_what_to_send(
    headers: dict[str, str], user_field: Any, status: int, code: str, says: str
) -> None:
    with pytest.raises(AppError) as refused:
        task_ref(headers, user_field)
    assert (refused.value.status_code, refused.value.code) == (status, code)
    assert says in refused.value.message


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1-nano", 1_047_576),
        ("gpt-4", 8_192),
        ("claude-sonnet-5-5", 200_000),
        ("llama3.1:8b", None),
    ],
)
def test_known_windows(model: str, window: int | None) -> None:
    assert known_window(model) == window


def test_the_window_header() -> None:
    assert requested_window({"x-context-window": "4000"}) == 4000
    assert requested_window({}) is None
    for bad in ("12", "lots", "-4000"):
        with pytest.raises(AppError, match="X-Context-Window"):
            requested_window({"x-context-window": bad})
