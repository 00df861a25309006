"""Which task a proxied request belongs to, as its headers and body say, and the window of a
model the service knows. Pure.

In order: the task uuid in the base URL (``/tasks/{uuid}/v1/...``, for an agent that takes
nothing but a base URL); else the header ``X-Context-Task: <uuid>``; else the task key headers
(``X-Context-Task-Source``, ``-Owner``, ``-Repo``, ``-Type``, ``-Id``, with ``X-Context-User``)
for an agent that cannot choose a uuid; else the body's own user field (OpenAI's ``user``,
Anthropic's ``metadata.user_id``) when it holds a uuid. Nothing of these: the request is refused,
saying which header to send.
"""

import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.budgets.windows import MIN_WINDOW
from app.errors import BadRequest, ErrorCode, InvalidInput
from app.task_key import TaskKey

__all__ = [
    "KEY_HEADERS",
    "TASK_HEADER",
    "USER_HEADER",
    "WINDOW_HEADER",
    "TaskRef",
    "default_key",
    "known_window",
    "requested_window",
    "task_ref",
]

TASK_HEADER = "x-context-task"
USER_HEADER = "x-context-user"
WINDOW_HEADER = "x-context-window"
KEY_HEADERS: dict[str, str] = {  # header -> task key field
    "x-context-task-source": "task_source",
    "x-context-task-owner": "owner",
    "x-context-task-repo": "repo",
    "x-context-task-type": "task_type",
    "x-context-task-id": "task_id",
}
# The key of a task a request named by uuid alone creates.
PROXY_SOURCE = "proxy"

# Context windows of well-known models, by the longest name prefix that matches; any other
# model takes X-Context-Window or the configured default.
_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
)


@dataclass(frozen=True)
class TaskRef:
    """A task named by uuid (``key`` None unless the headers gave one too, for a task the
    request creates), or by task key and user (``uuid`` None: the newest running one)."""

    uuid: str | None
    key: TaskKey | None
    user: str | None


def task_ref(headers: Mapping[str, str], user_field: Any, in_path: str | None = None) -> TaskRef:
    """The task a request names (``in_path``: the uuid its URL gives; headers by lower-case
    name); BadRequest when none."""
    user = headers.get(USER_HEADER) or None
    key = _key(headers)
    if in_path is not None:
        return TaskRef(uuid=in_path, key=key, user=user)
    named = headers.get(TASK_HEADER)
    if named is not None:
        return TaskRef(uuid=_uuid(named, TASK_HEADER), key=key, user=user)
    if key is not None:
        return TaskRef(uuid=None, key=key, user=user)
    if isinstance(user_field, str) and (named_in_body := _canonical_uuid(user_field)):
        return TaskRef(uuid=named_in_body, key=None, user=user)
    raise BadRequest(
        "this request names no task: use the base URL .../tasks/<task uuid>/v1, or send the "
        "header X-Context-Task: <task uuid>, or the task "
        "key headers X-Context-Task-Source, X-Context-Task-Owner, X-Context-Task-Repo, "
        "X-Context-Task-Type and X-Context-Task-Id (with X-Context-User), or put a task uuid "
        "in the body's user (OpenAI) or metadata.user_id (Anthropic)",
        code=ErrorCode.TASK_REQUIRED,
        details={"headers": ["X-Context-Task", *(h.title() for h in KEY_HEADERS)]},
    )


def _key(headers: Mapping[str, str]) -> TaskKey | None:
    given = {field: headers[h] for h, field in KEY_HEADERS.items() if headers.get(h)}
    if not given:
        return None
    missing = [h.title() for h, field in KEY_HEADERS.items() if field not in given]
    if missing:
        raise InvalidInput(
            f"a task key needs all five headers; missing: {', '.join(missing)}",
            code=ErrorCode.TASK_REQUIRED,
            details={"missing": missing},
        )
    try:
        return TaskKey.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(
            f"task key header for {first['loc'][0]}: {first['msg']}",
            code=ErrorCode.VALIDATION_ERROR,
            details={"field": str(first["loc"][0])},
        ) from None


def _uuid(value: str, header: str) -> str:
    canonical = _canonical_uuid(value)
    if canonical is None:
        raise InvalidInput(
            f"{header.title()} must be a task uuid, not {value[:64]!r}",
            code=ErrorCode.VALIDATION_ERROR,
            details={"header": header.title()},
        )
    return canonical


def _canonical_uuid(value: str) -> str | None:
    """The uuid ``value`` spells (spaces around it aside), in its canonical form; None if it
    spells none."""
    try:
        return str(uuid_module.UUID(value.strip()))
    except ValueError:
        return None


def default_key(task_uuid: str) -> TaskKey:
    """The task key of a task created from a request that named only its uuid."""
    return TaskKey(
        task_source=PROXY_SOURCE,
        owner=PROXY_SOURCE,
        repo=PROXY_SOURCE,
        task_type="conversation",
        task_id=task_uuid,
    )


def known_window(model: str) -> int | None:
    """The context window of a well-known model, by its name's longest known prefix."""
    name = model.strip().lower()
    matches = [(len(prefix), window) for prefix, window in _WINDOWS if name.startswith(prefix)]
    return max(matches)[1] if matches else None


def requested_window(headers: Mapping[str, str]) -> int | None:
    """X-Context-Window, when sent (InvalidInput unless a whole number from MIN_WINDOW)."""
    raw = headers.get(WINDOW_HEADER)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < MIN_WINDOW:
        raise InvalidInput(
            f"X-Context-Window must be a number of tokens, at least {MIN_WINDOW}, not {raw[:32]!r}",
            code=ErrorCode.VALIDATION_ERROR,
            details={"header": "X-Context-Window"},
        )
    return int(raw)
