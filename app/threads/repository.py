"""Thread queries."""

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Thread


async def threads_of(
    session: AsyncSession, task_uuid: str, thread_ids: Iterable[int] | None = None
) -> list[Thread]:
    """The task's threads (only these ids, if given), by id."""
    query = select(Thread).where(Thread.task_uuid == task_uuid)
    if thread_ids is not None:
        query = query.where(Thread.thread_id.in_(list(thread_ids)))
    return list(await session.scalars(query.order_by(Thread.thread_id)))


async def abort_active(session: AsyncSession, task_uuid: str, now: datetime) -> None:
    """Every active thread of the task aborted (its task finished)."""
    await session.execute(
        update(Thread)
        .where(Thread.task_uuid == task_uuid, Thread.status == "active")
        .values(status="aborted", completed_at=now)
    )


async def keep_chronicle(
    session: AsyncSession, task_uuid: str, thread_id: int, chronicle: str
) -> str | None:
    """Store the thread's chronicle unless it has one already; the one stored."""
    where = (Thread.task_uuid == task_uuid, Thread.thread_id == thread_id)
    await session.execute(
        update(Thread)
        .where(*where, Thread.chronicle_summary.is_(None))
        .values(chronicle_summary=chronicle)
    )
    return await session.scalar(select(Thread.chronicle_summary).where(*where))
