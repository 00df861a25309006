"""Creating a task: its files written in .staging/ (by the store), its row and head committed,
then the directory moved into place (a crash in between is finished or undone at startup); what it
inherits is prepared first, outside the task lock."""

import asyncio
import dataclasses
import hashlib
import logging
import uuid as uuid_module
from datetime import UTC, datetime
from typing import Any

import orjson

from app.budgets.policy import Budget, default_reserved_output
from app.budgets.service import Budgets
from app.config import EXTRACTIVE, Settings
from app.context.store import ContextStore
from app.db.models import ContextHead, Task
from app.errors import Conflict, ErrorCode, InvalidInput
from app.formats.anthropic import IDS_AS_POSTED
from app.inheritance.service import InheritanceService, Inherited
from app.messages.expand_tool import EXPAND_TOOL
from app.tasks.repository import running_siblings
from app.tasks.schemas import TaskCreate
from app.tasks.service import TaskService
from app.tasks.views import Siblings, TaskView
from app.webhooks.selection import check_chosen

log = logging.getLogger(__name__)

INHERITED_SHARE = 2  # the inherited context message takes at most 1/INHERITED_SHARE of the budget
MAX_RUNNING_SIBLINGS = 20  # uuids a create's answer lists (the count is of them all)


class TaskCreation:
    def __init__(
        self,
        tasks: TaskService,
        store: ContextStore,
        budgets: Budgets,
        inheritance: InheritanceService,
        settings: Settings,
        backend_names: frozenset[str],
    ) -> None:
        self.tasks = tasks
        self.store = store
        self.db = store.db
        self.locks = store.locks
        self.counting = store.counting
        self.budgets = budgets
        self.inheritance = inheritance
        self.settings = settings
        self.backend_names = backend_names | {EXTRACTIVE}

    async def create(self, body: TaskCreate) -> tuple[TaskView, bool]:
        """Create a task; returns it, with the other running tasks on its task key and user,
        and whether it is new (False: an idempotent re-POST)."""
        view, created = await self._create(body)
        async with self.db.reader() as session:
            count, uuids = await running_siblings(
                session, body.task_key, body.user, view.task.uuid, MAX_RUNNING_SIBLINGS
            )
        return dataclasses.replace(view, siblings=Siblings(count, uuids)), created

    async def _create(self, body: TaskCreate) -> tuple[TaskView, bool]:
        if body.summary_backend is not None and body.summary_backend not in self.backend_names:
            raise InvalidInput(
                f"no LLM backend named {body.summary_backend!r} is configured",
                code=ErrorCode.UNKNOWN_BACKEND,
                details={"configured": sorted(self.backend_names)},
            )
        check_chosen(self.settings.webhook.hooks, body.hooks)
        task_uuid = str(body.uuid or uuid_module.uuid4())
        fingerprint = _fingerprint(body)
        window = body.context_length or self.settings.compaction.default_context_length
        reserved = body.max_output_tokens or default_reserved_output(window)
        budget = self.budgets.for_model(body.model, window, reserved)
        if budget.allowed <= 0:
            raise InvalidInput(
                f"max_output_tokens {reserved} leaves no room in a {window}-token window",
                code=ErrorCode.NO_ROOM_FOR_CONTEXT,
                details={"window": window, "max_output_tokens": reserved},
            )
        # A uuid made here is new; only one the client chose may name an existing task.
        chosen = body.uuid is not None
        existing = await self._existing(task_uuid) if chosen else None
        if existing is None:
            counter_name = await asyncio.to_thread(self.counting.counter_name, body.model)
            # Outside the task lock: finding what to inherit may wait for a final summary.
            inherited = await self._inherited(body, counter_name, budget)
            async with self.locks.hold(task_uuid):
                existing = await self._existing(task_uuid) if chosen else None
                if existing is None:
                    try:
                        return await self._create_locked(
                            task_uuid, body, window, reserved, fingerprint, counter_name, inherited
                        )
                    except BaseException:
                        self.locks.discard(task_uuid)  # no task: no lock file either
                        raise
        if existing.create_fingerprint != fingerprint:
            # The same answer whoever's the task is: nothing about it (its tenant, its body)
            # may reach a caller who is perhaps not allowed to see it.
            raise Conflict(
                f"uuid {task_uuid} is already taken; only a repeat of its create with the same "
                "body is accepted",
                code=ErrorCode.TASK_EXISTS,
                details={"uuid": task_uuid},
            )
        return await self.tasks.get(task_uuid), False

    async def _existing(self, task_uuid: str) -> Task | None:
        async with self.db.reader() as session:
            return await session.get(Task, task_uuid)

    async def _inherited(
        self, body: TaskCreate, counter_name: str, budget: Budget
    ) -> Inherited | None:
        wanted = body.inherit if body.inherit is not None else self.settings.inheritance.enabled
        if not wanted:
            return None
        counter = self.counting.counter(counter_name)
        # At most half the budget: a small window keeps room for the run itself.
        limit = min(self.settings.inheritance.max_summary_tokens, budget.allowed // INHERITED_SHARE)
        return await self.inheritance.prepare(body.task_key, body.user, counter, limit)

    async def _create_locked(
        self,
        task_uuid: str,
        body: TaskCreate,
        window: int,
        reserved: int,
        fingerprint: str,
        counter_name: str,
        inherited: Inherited | None,
    ) -> tuple[TaskView, bool]:
        now = datetime.now(UTC)
        counting = self.counting
        tools_openai, tools_other = await asyncio.to_thread(
            counting.costs(counter_name).tools, payload_tools(body)
        )
        task = Task(
            uuid=task_uuid,
            **body.task_key.model_dump(),
            user=body.user,
            status="running",
            created_at=now,
            started_at=now,
            updated_at=now,
            llm_provider=body.llm_provider,
            model=body.model,
            context_length=window,
            max_output_tokens=reserved,
            metadata_=body.metadata,
            hooks=body.hooks,
            compaction=body.compaction.model_dump(exclude_none=True) if body.compaction else None,
            pin_plan=body.pin_plan,
            expand_tool=body.expand_tool,
            plan_tokens=0,
            format_plan_tokens={},
            token_counter=counter_name,
            tools_tokens=tools_openai,
            format_tools_tokens=tools_other,
            token_calibration=1.0,
            calibration_samples=0,
            create_fingerprint=fingerprint,
            llm_call_count=0,
            tool_call_count=0,
            total_tokens=0,
            compression_count=0,
            total_messages=0,
            total_summaries=0,
        )
        initial = [{"role": "system", "content": body.system_prompt}] if body.system_prompt else []
        if inherited is not None:  # a leading system message: condense always keeps it
            initial.append({"role": "system", "content": inherited.content})
            task.inherited_from = inherited.record["from_uuid"]
            task.inheritance = inherited.record | {"seq": len(initial)}
        store = self.store
        await store.clear_the_way(task_uuid)
        try:
            head, stats = await store.stage_task(task, self._metadata(task, body), initial)
            task.total_messages = stats.messages
            async with self.db.transaction() as session:
                session.add(task)
                await session.flush()  # the head's foreign key needs the task row first
                session.add(ContextHead(task_uuid=task_uuid, thread_id=0, **vars(head)))
        except BaseException:
            await store.discard_staged(task_uuid)
            raise
        try:
            # The way is clear, so this fails only on a broken disk. A crash before it leaves
            # the row and .staging/{uuid}: startup reconciliation finishes the move.
            await store.place_staged(task_uuid)
        except BaseException:
            await self._undo_create(task_uuid)
            raise
        log.info("task %s: created", task_uuid, extra={"task_uuid": task_uuid})
        return self.tasks.view(task, head), True

    async def _undo_create(self, task_uuid: str) -> None:
        """The row committed but the directory could not go in place: the row goes again, so
        that the create fails whole (and may be retried)."""
        async with self.db.transaction() as session:
            row = await session.get(Task, task_uuid)
            if row is not None:
                await session.delete(row)
        await self.store.discard_staged(task_uuid)

    def _metadata(self, task: Task, body: TaskCreate) -> dict[str, Any]:
        """The task's metadata.json."""
        return {
            "uuid": task.uuid,
            "task_key": body.task_key.model_dump(),
            "user": task.user,
            "created_at": task.created_at.isoformat(),
            # the field names the original design's clients read
            "task_type": task.task_type,
            "task_identifier": task.task_id,
            "repository": f"{task.owner}/{task.repo}",
            # the original design's "config" block
            "config": {
                "llm_provider": task.llm_provider,
                "model": task.model,
                "context_length": task.context_length,
                "max_output_tokens": task.max_output_tokens,
                "compression_threshold": self.settings.compaction.condense_threshold,
            },
            "tools": payload_tools(body),
            "request_defaults": body.request_defaults,
            # Tool ids reach Anthropic payloads as posted: this task's messages are counted for
            # that (older tasks' were not, and keep canonical ids).
            "tool_ids": IDS_AS_POSTED,
            "summary_backend": body.summary_backend,
            "inherit": body.inherit,
            "metadata": body.metadata,
        }


def _fingerprint(body: TaskCreate) -> str:
    # Options added since the first release count only when set, so a re-POST of a task
    # created before them still matches its stored fingerprint.
    later = {
        name
        for name in ("hooks", "pin_plan", "compaction", "expand_tool")
        if not getattr(body, name)
    }
    data = body.model_dump(mode="json", exclude={"uuid", *later})
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def payload_tools(body: TaskCreate) -> list[dict[str, Any]]:
    """The tools every payload of the task offers: the agent's, then context_expand if asked
    for (counted and rendered like the agent's own)."""
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    return [*tools, EXPAND_TOOL] if body.expand_tool else tools
