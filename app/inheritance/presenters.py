"""What a task inherited, as API answers."""

from app.db.models import Task
from app.inheritance.schemas import InheritanceOut, InheritanceRecord


def inheritance_out(task: Task) -> InheritanceOut:
    record, comment = inherited(task)
    return InheritanceOut(
        uuid=task.uuid,
        inherited_from=task.inherited_from,
        inheritance=record,
        notification_comment=comment,
    )


def inherited(task: Task) -> tuple[InheritanceRecord | None, str | None]:
    """The task's inheritance record and its notification comment (None, None: nothing)."""
    if task.inheritance is None:
        return None, None
    record = InheritanceRecord.model_validate(task.inheritance)
    return record, record.notification_comment
