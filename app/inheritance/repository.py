"""The queries inheritance makes of the tasks table."""

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Task
from app.lifecycle import FINISHED
from app.task_key import TaskKey


async def finished_runs(
    session: AsyncSession, key: TaskKey, user: str | None, limit: int
) -> list[Task]:
    """Finished tasks with this key and user, newest completion first."""
    query = select(Task).where(
        *(getattr(Task, name) == value for name, value in key.model_dump().items()),
        Task.user.is_(None) if user is None else Task.user == user,
        Task.status.in_(FINISHED),
    )
    query = query.order_by(Task.completed_at.desc(), Task.uuid.desc()).limit(limit)
    return list(await session.scalars(query))
