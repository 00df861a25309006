"""A task's budget and a context's payload tokens, from the settings and the task's row.

No I/O: everything it needs is on the task row, the head and the thread tree the store has
already read, so compaction, payloads, planning and threads all ask it the same question and
get the same answer.
"""

from app.budgets.policy import Budget, CompactionOptions, budget_for, effective_threshold
from app.budgets.windows import chain_ratios
from app.config import Settings
from app.context.records import HeadState
from app.context.store import LockedTask
from app.db.models import Task
from app.formats import FORMATS
from app.formats.costs import TokenCounting, in_format
from app.tokens.accounting import PER_PAYLOAD


def tools_tokens(task: Task, fmt: str) -> int:
    """Counted tokens of the task's tool definitions as ``fmt`` renders them."""
    return in_format(task.tools_tokens, task.format_tools_tokens or {}, fmt)


class Budgets:
    def __init__(self, settings: Settings, counting: TokenCounting) -> None:
        self.settings = settings
        self.counting = counting

    def budget(self, task: Task) -> Budget:
        """The task's budget in counted tokens, its calibration applied."""
        return self.for_model(
            task.model, task.context_length, task.max_output_tokens, task.token_calibration
        )

    def for_model(self, model: str, window: int, reserved: int, calibration: float = 1.0) -> Budget:
        """The budget of a task on ``model`` (one being created has no calibration yet)."""
        settings = self.settings
        share = effective_threshold(
            settings.compaction.condense_threshold,
            settings.compaction.condense_profile_thresholds.get(model),
            model,
        )
        return budget_for(
            window,
            reserved,
            buffer=settings.compaction.context_buffer,
            condense_threshold=share,
            token_threshold=settings.compaction.token_threshold,
            calibration=calibration,
        )

    def compaction_options(self, task: Task) -> CompactionOptions:
        """The task's compaction tiers and masking, its own choices over the server's."""
        server = CompactionOptions(
            tiers=self.settings.compaction.tiers,
            keep_tool_results=self.settings.compaction.keep_tool_results,
        )
        return server.merged(task.compaction)

    def context_budget(self, context: LockedTask) -> Budget:
        """The budget of one context: the task's, or a thread's share of it."""
        return self.budget(context.task).share(chain_ratios(context.thread_id, context.threads))

    def message_cap(self, context: LockedTask) -> int:
        """The most one message of a context may cost: ``max_message_share`` of its budget."""
        share = self.settings.compaction.max_message_share
        return int(self.context_budget(context).allowed * share)

    def context_tokens(self, context: LockedTask, head: HeadState, fmt: str) -> int:
        """Counted tokens of a context's own payload in ``fmt``: a thread's carries no pinned
        plan (the task's plan is the root's; a thread works on what it was given)."""
        return self.payload_tokens(context.task, head, fmt, pinned=not context.thread_id)

    def payload_tokens(self, task: Task, head: HeadState, fmt: str, *, pinned: bool = True) -> int:
        """Counted tokens of the payload in ``fmt`` ("openai", "anthropic" or "ollama")."""
        tokens = head.tokens(fmt) + tools_tokens(task, fmt) + PER_PAYLOAD
        if pinned and task.pin_plan and task.pinned_plan:
            tokens += in_format(task.plan_tokens, task.format_plan_tokens or {}, fmt)
        if head.open_tool_calls:
            counter = self.counting.counter(task.token_counter)
            open_ids = [call[0] for call in head.open_tool_calls]
            tokens += FORMATS[fmt].open_calls_tokens(counter, open_ids)
        return tokens
