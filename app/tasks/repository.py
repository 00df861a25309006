"""Task queries."""

import base64
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.keys import OPEN, Principal
from app.db.base import as_utc
from app.db.models import Task
from app.errors import ErrorCode, InvalidInput
from app.lifecycle import FINISHED
from app.task_key import TaskKey

FILTER_COLUMNS = ("status", "user", "task_source", "owner", "repo", "task_type", "task_id")


async def counter_names(session: AsyncSession) -> set[str]:
    """The token counters existing tasks count with."""
    return set(await session.scalars(select(Task.token_counter).distinct()))


async def finished_before(
    session: AsyncSession, cutoff: datetime, after: tuple[datetime, str] | None, limit: int
) -> list[tuple[str, datetime]]:
    """Finished tasks completed before ``cutoff``, oldest first, after ``after`` (the
    completion time and uuid the previous page ended with): (uuid, completed_at)."""
    query = select(Task.uuid, Task.completed_at).where(
        Task.status.in_(FINISHED), Task.completed_at < cutoff
    )
    if after is not None:
        at, last = after
        query = query.where(
            or_(Task.completed_at > at, and_(Task.completed_at == at, Task.uuid > last))
        )
    rows = await session.execute(query.order_by(Task.completed_at, Task.uuid).limit(limit))
    found = []
    for uuid, completed_at in rows:
        assert completed_at is not None  # the query selects finished tasks only
        found.append((uuid, completed_at))
    return found


async def completion(session: AsyncSession, task_uuid: str) -> tuple[str, datetime | None] | None:
    """The task's status and completion time; None if there is no such task."""
    row = (
        await session.execute(select(Task.status, Task.completed_at).where(Task.uuid == task_uuid))
    ).one_or_none()
    return None if row is None else (row.status, row.completed_at)


def running_siblings_query(
    key: TaskKey, user: str | None, task_uuid: str, limit: int
) -> Select[str, int]:
    """Other running tasks on the same task key and user, newest first, each row with the
    count of them all: one query, on the task-key index."""
    same = [getattr(Task, name) == value for name, value in key.model_dump().items()]
    return (
        select(Task.uuid, func.count().over())
        .where(
            *same,
            Task.user.is_(None) if user is None else Task.user == user,
            Task.status == "running",
            Task.uuid != task_uuid,
        )
        .order_by(Task.created_at.desc(), Task.uuid)
        .limit(limit)
    )


async def running_siblings(
    session: AsyncSession, key: TaskKey, user: str | None, task_uuid: str, limit: int
) -> tuple[int, list[str]]:
    """How many other tasks on the same task key and user are running, and the uuids of the
    newest ``limit`` of them."""
    rows = (await session.execute(running_siblings_query(key, user, task_uuid, limit))).all()
    return (int(rows[0][1]) if rows else 0), [str(uuid) for uuid, _ in rows]


async def task_exists(session: AsyncSession, task_uuid: str) -> bool:
    found = await session.scalar(select(Task.uuid).where(Task.uuid == task_uuid))
    return found is not None


async def count_by_status(session: AsyncSession) -> dict[str, int]:
    rows = await session.execute(select(Task.status, func.count()).group_by(Task.status))
    return {str(status): int(n) for status, n in rows}


def encode_cursor(task: Task) -> str:
    raw = f"{task.created_at.isoformat()}|{task.uuid}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, uuid = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
        when = datetime.fromisoformat(created)
        if when.tzinfo is None:
            raise ValueError("issued cursors carry a zone")
        return as_utc(when), uuid
    except ValueError as exc:
        raise InvalidInput(
            "cursor is not one this service issued", code=ErrorCode.INVALID_CURSOR
        ) from exc


async def list_tasks(
    session: AsyncSession,
    *,
    filters: dict[str, Any],
    created_after: datetime | None,
    created_before: datetime | None,
    cursor: str | None,
    limit: int,
    scope: Principal = OPEN,
) -> list[Task]:
    """Newest first; keyset pagination on (created_at, uuid); only tasks ``scope`` may see."""
    query: Select[tuple[Task]] = select(Task)
    if scope.users is not None:
        query = query.where(Task.user.in_(scope.users))
    if scope.task_sources is not None:
        query = query.where(Task.task_source.in_(scope.task_sources))
    for column in FILTER_COLUMNS:
        if filters.get(column) is not None:
            query = query.where(getattr(Task, column) == filters[column])
    if created_after is not None:
        query = query.where(Task.created_at >= as_utc(created_after))
    if created_before is not None:
        query = query.where(Task.created_at < as_utc(created_before))
    if cursor is not None:
        created, uuid = _decode_cursor(cursor)
        query = query.where(
            or_(Task.created_at < created, and_(Task.created_at == created, Task.uuid < uuid))
        )
    query = query.order_by(Task.created_at.desc(), Task.uuid.desc()).limit(limit)
    return list(await session.scalars(query))
