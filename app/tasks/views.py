"""A task as the service answers it: the row, its head and its budget."""

from dataclasses import dataclass

from app.budgets.policy import Budget
from app.context.records import HeadState
from app.db.models import Task


@dataclass(frozen=True)
class TaskView:
    task: Task
    head: HeadState | None
    budget: Budget
    payload_tokens: int | None  # counted, in the task's own provider format
