"""What a context's growth calls for: a message over the cap cut at once, and a background
condense when the threshold is crossed or the budget exceeded. Given to the store (after each
group commit), to planning (a pinned plan that grew) and to threads (a parent that took a
thread's result)."""

import logging

from app.budgets.service import Budgets
from app.compaction.service import CompactionService, Outcome
from app.context.group_commit import FollowUp
from app.context.records import HeadState
from app.context.store import LockedTask
from app.errors import TaskNotFound
from app.formats import native_format
from app.jobs.queue import JobQueue

log = logging.getLogger(__name__)


class CondenseTrigger:
    def __init__(self, budgets: Budgets, jobs: JobQueue, compaction: CompactionService) -> None:
        self.budgets = budgets
        self.jobs = jobs
        self.compaction = compaction

    async def after_append(
        self, context: LockedTask, before: HeadState, after: HeadState
    ) -> FollowUp:
        """Cut what the append (``before`` -> ``after``) brought over the message cap; queue a
        condense when it crossed the context's threshold."""
        fmt = native_format(context.task.llm_provider)
        old = self.budgets.context_tokens(context, before, fmt)
        new = self.budgets.context_tokens(context, after, fmt)
        cuts: list[tuple[int, Outcome]] = []
        if new - old > self.budgets.message_cap(context):  # no need to look when less came
            try:
                cuts = await self.compaction.cap(context, before, after)
            except Exception:
                # Reading what the append brought failed: its messages stay whole until a
                # payload needs them cut.
                log.exception("task %s: cutting what an append brought failed", context.task.uuid)
        if cuts:
            new = cuts[-1][1].tokens_after
        scheduled = await self.if_crossed(context, old, new)
        return FollowUp(scheduled, _taken_off(after.context_tokens, cuts))

    async def if_crossed(self, context: LockedTask, old: int, new: int) -> bool:
        """Queue a condense when a context's payload went from ``old`` to ``new`` tokens (in
        its provider's format) across the threshold, or is over the budget."""
        budget = self.budgets.context_budget(context)
        if old < budget.threshold <= new or new > budget.allowed:
            try:
                await self.jobs.enqueue_once(context.task.uuid, "condense", context.thread_id)
            except TaskNotFound:  # deleted since the change that called for it: nothing to do
                return False
            return True
        return False


def _taken_off(uncut: int, cuts: list[tuple[int, Outcome]]) -> tuple[tuple[int, int], ...]:
    """Each cut's seq and the tokens it took off the context, from the context's ``uncut``
    tokens (OpenAI's rendering, as an append's answer counts them)."""
    taken = []
    for seq, step in cuts:
        assert step.context_tokens is not None  # a cut commits its marker
        taken.append((seq, uncut - step.context_tokens))
        uncut = step.context_tokens
    return tuple(taken)
