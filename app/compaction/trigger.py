"""When a context's growth calls for a background condense: the threshold crossed, or the
budget exceeded. Given to the store (after each group commit), to planning (a pinned plan
that grew) and to threads (a parent that took a thread's result)."""

from app.budgets.service import Budgets
from app.context.records import HeadState
from app.context.store import LockedTask
from app.formats import native_format
from app.jobs.queue import JobQueue


class CondenseTrigger:
    def __init__(self, budgets: Budgets, jobs: JobQueue) -> None:
        self.budgets = budgets
        self.jobs = jobs

    async def after_append(self, context: LockedTask, before: HeadState, after: HeadState) -> bool:
        """Queue a condense when an append (``before`` -> ``after``) crosses the context's
        threshold; return whether one was queued."""
        fmt = native_format(context.task.llm_provider)
        old = self.budgets.context_tokens(context, before, fmt)
        return await self.if_crossed(context, old, self.budgets.context_tokens(context, after, fmt))

    async def if_crossed(self, context: LockedTask, old: int, new: int) -> bool:
        """Queue a condense when a context's payload went from ``old`` to ``new`` tokens (in
        its provider's format) across the threshold, or is over the budget."""
        budget = self.budgets.context_budget(context)
        if old < budget.threshold <= new or new > budget.allowed:
            await self.jobs.enqueue_once(context.task.uuid, "condense", context.thread_id)
            return True
        return False
