"""A task as the service answers it: the row, its head and its budget."""

from dataclasses import dataclass, field

from app.budgets.policy import Budget
from app.context.records import HeadState
from app.db.models import Task


@dataclass(frozen=True)
class Siblings:
    """Other running tasks on the same task key and user (a second run of one issue)."""

    count: int = 0
    uuids: list[str] = field(default_factory=list)  # the newest, at most MAX_RUNNING_SIBLINGS


@dataclass(frozen=True)
class TaskView:
    task: Task
    head: HeadState | None
    budget: Budget
    payload_tokens: int | None  # counted, in the task's own provider format
    siblings: Siblings | None = None  # on a create's answer only
