"""Planning entries, and the pinned plan: the latest entry kept in every payload.

With ``pin_plan``, writing an entry also stores, in the task row and under the task lock, the
message that carries it (after the first user message of every payload, app/planning/pinning.py)
and its cost in each counted format, so budgets include it without reading any file. The
message carries the current plan items too (app/planning/items.py), with their status, even
when a later free-text entry is the latest. It is capped to a quarter of the budget: a huge
plan cannot crowd out the conversation.
"""

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from app.budgets.service import Budgets
from app.context.store import ContextStore, LockedTask
from app.db.models import Task
from app.formats import native_format
from app.journals.service import JournalService
from app.planning import repository
from app.planning.items import CurrentItems, current_plan, latest_items, render_items
from app.planning.pinning import pinned_message
from app.storage.layout import PLANNING
from app.tokens.cutting import cut

PINNED_SHARE = 4  # the pinned plan takes at most 1/PINNED_SHARE of the budget
PINNED_HEADER = "[Current plan: planning entry {id} ({plan_type}, {created_at})]\n"
ITEMS_FROM = "(items as set by planning entry {entry_id})\n"


# Queues a condense when a context's tokens went from one count to another across its
# threshold (the condense trigger's ``if_crossed``).
CondenseIfCrossed = Callable[[LockedTask, int, int], Awaitable[bool]]


class PlanningService:
    def __init__(
        self,
        journal: JournalService,
        store: ContextStore,
        budgets: Budgets,
        condense_if_crossed: CondenseIfCrossed,
    ) -> None:
        self.journal = journal
        self.store = store
        self.budgets = budgets
        self.condense_if_crossed = condense_if_crossed

    async def append(self, task_uuid: str, fields: dict[str, Any]) -> dict[str, Any]:
        return await self.journal.append(task_uuid, fields, then=self._pin)

    async def page(
        self, task_uuid: str, after: int, limit: int
    ) -> tuple[list[dict[str, Any]], bool, CurrentItems | None]:
        """A page of entries, whether more follow, and the current items."""
        entries, more = await self.journal.page(task_uuid, after, limit)
        return entries, more, await self.journal.read(task_uuid, latest_items)

    async def current(self, task_uuid: str) -> tuple[dict[str, Any] | None, CurrentItems | None]:
        """The latest entry and the current items."""
        return await self.journal.read(task_uuid, current_plan)

    async def _pin(self, locked: LockedTask, entry: dict[str, Any]) -> None:
        task = locked.task
        if not task.pin_plan:
            return
        limit = max(self.budgets.budget(task).allowed // PINNED_SHARE, 16)
        planning = self.store.task_dir(task) / PLANNING
        content, (openai, others) = await asyncio.to_thread(
            self._message, task, entry, planning, limit
        )
        async with self.store.db.transaction() as session:
            await repository.set_pinned_plan(session, task.uuid, content, openai, others)
        values = {"pinned_plan": content, "plan_tokens": openai, "format_plan_tokens": others}
        # A larger plan may take the payload over the threshold, as an append may.
        fmt = native_format(task.llm_provider)
        before = self.budgets.context_tokens(locked, locked.head, fmt)
        for name, value in values.items():
            setattr(task, name, value)  # a detached row: only this request's view changes
        after = self.budgets.context_tokens(locked, locked.head, fmt)
        await self.condense_if_crossed(locked, before, after)

    def _message(
        self, task: Task, entry: dict[str, Any], planning: Path, limit: int
    ) -> tuple[str, tuple[int, dict[str, int]]]:
        costs = self.store.costs(task)
        body = entry["plan_content"]
        if not isinstance(body, str):
            body = orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
        content = PINNED_HEADER.format(**entry) + body
        current = latest_items(planning)  # this entry's items, or those an earlier one set
        if current is not None and current.items:
            if not content.endswith("\n"):
                content += "\n"
            if current.entry_id != entry["id"]:
                content += ITEMS_FROM.format(entry_id=current.entry_id)
            content += render_items(current.items)
        count = self.store.costs(task).counter.count_text
        content = cut(count, content, limit - 16)  # 16: the message's own overhead, and more
        return content, costs.message(pinned_message(content))
