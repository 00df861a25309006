"""Which tasks a key may see: those of its tenants (another tenant's task is "not found", so a
scoped key cannot even learn that it exists)."""

from app.auth.keys import Principal
from app.db.engine import Database
from app.db.models import Task
from app.errors import TaskNotFound


async def require_visible(db: Database, task_uuid: str, principal: Principal) -> None:
    """TaskNotFound unless the task exists and is one of ``principal``'s tenants'."""
    if not principal.scoped:
        return
    async with db.statements() as session:
        task = await session.get(Task, task_uuid)
    if task is None or not principal.allows(task.user, task.task_source):
        raise TaskNotFound(task_uuid)
