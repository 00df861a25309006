"""What planning writes to the tasks table: the pinned plan and its costs."""

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Task


async def set_pinned_plan(
    session: AsyncSession, task_uuid: str, content: str, tokens: int, format_tokens: dict[str, int]
) -> None:
    await session.execute(
        update(Task)
        .where(Task.uuid == task_uuid)
        .values(pinned_plan=content, plan_tokens=tokens, format_plan_tokens=format_tokens)
    )
