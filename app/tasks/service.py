"""Task creation, lookup, listing, status transitions and deletion."""

import asyncio
import hashlib
import logging
import shutil
import uuid as uuid_module
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import update

from app.auth.keys import Principal
from app.compaction.policy import (
    Budget,
    CompactionOptions,
    budget_for,
    default_reserved_output,
    effective_threshold,
)
from app.config import Settings
from app.context.files import ContextFiles, write_group
from app.context.records import ContextAccumulator, HeadState, StatsDelta, utc_timestamp
from app.context.store import ContextStore, LockedTask
from app.db.models import ContextHead, Job, Task, Thread
from app.errors import Conflict, InvalidInput, StorageError, TaskNotFound
from app.formats import FORMATS, native_format
from app.inheritance.service import InheritanceService, Inherited
from app.jobs.queue import JobQueue
from app.storage.jsonl import fsync_dir, write_atomic
from app.storage.layout import METADATA, ORPHANS, STATUS_DIRS
from app.tasks import lifecycle, repository
from app.tasks.presenters import task_out
from app.tasks.schemas import TaskCreate
from app.tasks.views import TaskView
from app.threads.windows import chain_ratios
from app.tokens.accounting import PER_PAYLOAD
from app.tokens.costs import in_format
from app.webhooks.selection import EVENTS, check_chosen, hooks_for

log = logging.getLogger(__name__)

INHERITED_SHARE = 2  # the inherited context message takes at most 1/INHERITED_SHARE of the budget


def tools_tokens(task: Task, fmt: str) -> int:
    """Counted tokens of the task's tool definitions as ``fmt`` renders them."""
    return in_format(task.tools_tokens, task.format_tools_tokens or {}, fmt)


class TaskService:
    def __init__(
        self,
        store: ContextStore,
        settings: Settings,
        backend_names: frozenset[str],
        jobs: JobQueue,
        inheritance: InheritanceService,
    ) -> None:
        self.store = store
        self.settings = settings
        self.jobs = jobs
        self.inheritance = inheritance
        self.backend_names = backend_names | {"extractive"}
        self._fsync = settings.storage.fsync == "always"

    def budget(self, task: Task) -> Budget:
        """The task's budget in counted tokens, its calibration applied."""
        return self._budget(
            task.model, task.context_length, task.max_output_tokens, task.token_calibration
        )

    def compaction_options(self, task: Task) -> CompactionOptions:
        """The task's compaction tiers and masking, its own choices over the server's."""
        server = CompactionOptions(
            tiers=self.settings.compaction.tiers,
            keep_tool_results=self.settings.compaction.keep_tool_results,
        )
        return server.merged(task.compaction)

    def context_budget(self, context: LockedTask) -> Budget:
        """The budget of one context: the task's, or a thread's share of it (seed 003)."""
        return self.budget(context.task).share(chain_ratios(context.thread_id, context.threads))

    def _budget(self, model: str, window: int, reserved: int, calibration: float = 1.0) -> Budget:
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

    def view(self, task: Task, head: HeadState | None = None) -> TaskView:
        tokens = None
        if head is not None:
            tokens = self.payload_tokens(task, head, native_format(task.llm_provider))
        return TaskView(task=task, head=head, budget=self.budget(task), payload_tokens=tokens)

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
            counter = self.store.counting.counter(task.token_counter)
            tokens += FORMATS[fmt].open_calls_tokens(counter, len(head.open_tool_calls))
        return tokens

    async def schedule_condense(
        self, context: LockedTask, before: HeadState, after: HeadState
    ) -> bool:
        """Condense a context in the background when an append (``before`` -> ``after``)
        crosses its threshold (SPEC §6)."""
        fmt = native_format(context.task.llm_provider)
        old = self.context_tokens(context, before, fmt)
        return await self.condense_if_crossed(
            context, old, self.context_tokens(context, after, fmt)
        )

    async def condense_if_crossed(self, context: LockedTask, old: int, new: int) -> bool:
        """Queue a condense when a context's payload went from ``old`` to ``new`` tokens (in
        its provider's format) across the threshold, or is over the budget."""
        budget = self.context_budget(context)
        if old < budget.threshold <= new or new > budget.allowed:
            await self.jobs.enqueue_once(context.task.uuid, "condense", context.thread_id)
            return True
        return False

    # -- create ---------------------------------------------------------------------------

    async def create(self, body: TaskCreate) -> tuple[TaskView, bool]:
        """Create a task; returns it and whether it is new (False: an idempotent re-POST)."""
        if body.summary_backend is not None and body.summary_backend not in self.backend_names:
            raise InvalidInput(
                f"no LLM backend named {body.summary_backend!r} is configured",
                code="unknown_backend",
                details={"configured": sorted(self.backend_names)},
            )
        check_chosen(self.settings.webhook.hooks, body.hooks)
        task_uuid = str(body.uuid or uuid_module.uuid4())
        fingerprint = _fingerprint(body)
        window = body.context_length or self.settings.compaction.default_context_length
        reserved = body.max_output_tokens or default_reserved_output(window)
        budget = self._budget(body.model, window, reserved)
        if budget.allowed <= 0:
            raise InvalidInput(
                f"max_output_tokens {reserved} leaves no room in a {window}-token window",
                code="no_room_for_context",
                details={"window": window, "max_output_tokens": reserved},
            )
        async with self.store.db.reader() as session:
            existing = await session.get(Task, task_uuid)
        if existing is None:
            counter_name = await asyncio.to_thread(self.store.counting.counter_name, body.model)
            # Outside the task lock: finding what to inherit may wait for a final summary.
            inherited = await self._inherited(body, counter_name, budget)
            async with self.store.locks.hold(task_uuid):
                async with self.store.db.reader() as session:
                    existing = await session.get(Task, task_uuid)
                if existing is None:
                    try:
                        return await self._create_locked(
                            task_uuid, body, window, reserved, fingerprint, counter_name, inherited
                        )
                    except BaseException:
                        self.store.locks.discard(task_uuid)  # no task: no lock file either
                        raise
        if existing.create_fingerprint != fingerprint:
            # The same answer whoever's the task is: nothing about it (its tenant, its body)
            # may reach a caller who is perhaps not allowed to see it.
            raise Conflict(
                f"uuid {task_uuid} is already taken; only a repeat of its create with the same "
                "body is accepted",
                code="task_exists",
                details={"uuid": task_uuid},
            )
        return await self.get(task_uuid), False

    async def _inherited(
        self, body: TaskCreate, counter_name: str, budget: Budget
    ) -> Inherited | None:
        wanted = body.inherit if body.inherit is not None else self.settings.inheritance.enabled
        if not wanted:
            return None
        counter = self.store.counting.counter(counter_name)
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
        layout = self.store.layout
        now = datetime.now(UTC)
        counting = self.store.counting
        tools_openai, tools_other = await asyncio.to_thread(
            counting.costs(counter_name).tools,
            [t.model_dump(exclude_none=True) for t in body.tools or []],
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
        staging = layout.location_dir(".staging", task_uuid)
        initial = [{"role": "system", "content": body.system_prompt}] if body.system_prompt else []
        if inherited is not None:  # a leading system message: condense always keeps it
            initial.append({"role": "system", "content": inherited.content})
            task.inherited_from = inherited.record["from_uuid"]
            task.inheritance = inherited.record | {"seq": len(initial)}
        await asyncio.to_thread(self._clear_the_way, task_uuid)
        try:
            head, stats = await asyncio.to_thread(
                self._write_initial_files, staging, task, body, initial
            )
            task.total_messages = stats.messages
            async with self.store.db.transaction() as session:
                session.add(task)
                await session.flush()  # the head's foreign key needs the task row first
                session.add(ContextHead(task_uuid=task_uuid, thread_id=0, **vars(head)))
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, staging, ignore_errors=True)
            raise
        try:
            # The way is clear, so this fails only on a broken disk. A crash before it leaves
            # the row and .staging/{uuid}: startup reconciliation finishes the move.
            await asyncio.to_thread(layout.move, task_uuid, ".staging", "running")
        except BaseException:
            await self._undo_create(task_uuid, staging)
            raise
        log.info("task %s: created", task_uuid, extra={"task_uuid": task_uuid})
        return self.view(task, head), True

    def _clear_the_way(self, task_uuid: str) -> None:
        """Make room for a new task's directory (its row does not exist; the lock is held).

        A directory in a status location has no row, so its files are not a task's the
        service knows, perhaps newer than a restored database: set aside intact, never
        overwritten. One in .trash/ is the rest of a delete that committed: removed.
        """
        layout = self.store.layout
        for location in dict.fromkeys(STATUS_DIRS.values()):
            if layout.location_dir(location, task_uuid).is_dir():
                target = layout.set_aside(task_uuid, location)
                log.warning(
                    "task %s: %s/ held a directory without a task row; set aside as %s/%s",
                    task_uuid,
                    location,
                    ORPHANS,
                    target.name,
                    extra={"task_uuid": task_uuid},
                )
        shutil.rmtree(layout.location_dir(".trash", task_uuid), ignore_errors=True)

    async def _undo_create(self, task_uuid: str, staging: Path) -> None:
        """The row committed but the directory could not go in place: the row goes again, so
        that the create fails whole (and may be retried)."""
        async with self.store.db.transaction() as session:
            row = await session.get(Task, task_uuid)
            if row is not None:
                await session.delete(row)
        await asyncio.to_thread(shutil.rmtree, staging, ignore_errors=True)

    def _write_initial_files(
        self, directory: Path, task: Task, body: TaskCreate, initial: list[dict[str, Any]]
    ) -> tuple[HeadState, StatsDelta]:
        shutil.rmtree(directory, ignore_errors=True)  # a leftover of a crashed create
        directory.mkdir(parents=True)
        metadata = {
            "uuid": task.uuid,
            "task_key": body.task_key.model_dump(),
            "user": task.user,
            "created_at": task.created_at.isoformat(),
            # seed 000 §11.6 names
            "task_type": task.task_type,
            "task_identifier": task.task_id,
            "repository": f"{task.owner}/{task.repo}",
            # seed 001 §3.1 names
            "config": {
                "llm_provider": task.llm_provider,
                "model": task.model,
                "context_length": task.context_length,
                "max_output_tokens": task.max_output_tokens,
                "compression_threshold": self.settings.compaction.condense_threshold,
            },
            "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
            "request_defaults": body.request_defaults,
            "summary_backend": body.summary_backend,
            "inherit": body.inherit,
            "metadata": body.metadata,
        }
        write_atomic(
            directory / METADATA,
            iter([orjson.dumps(metadata, option=orjson.OPT_INDENT_2)]),
            fsync=self._fsync,
        )
        accumulator = ContextAccumulator(HeadState())
        record_lines, current_lines = [], []
        if initial:
            for record, line in accumulator.prepare(
                initial,
                costs=self.store.counting.costs(task.token_counter),
                timestamp=utc_timestamp(),
                max_message_bytes=self.settings.limits.max_message_bytes,
            ):
                record_lines.append(line)
                current_lines.append(accumulator.admit(record, line))
        write_group(ContextFiles(directory), record_lines, current_lines, fsync=self._fsync)
        if self._fsync:
            fsync_dir(directory)
        return accumulator.head, accumulator.stats

    # -- read -----------------------------------------------------------------------------

    async def get(self, task_uuid: str) -> TaskView:
        await self.store.flush([task_uuid])  # its counters, with every acknowledged append
        context = await self.store.head(task_uuid)
        return self.view(context.task, context.head)

    async def require_visible(self, task_uuid: str, principal: Principal) -> None:
        """TaskNotFound unless the task exists and is one of ``principal``'s tenants'."""
        async with self.store.db.reader() as session:
            task = await session.get(Task, task_uuid)
        if task is None or not principal.allows(task.user, task.task_source):
            raise TaskNotFound(task_uuid)

    async def list(self, **query: Any) -> list[Task]:
        await self.store.flush()
        async with self.store.db.reader() as session:
            return await repository.list_tasks(session, **query)

    # -- lifecycle ------------------------------------------------------------------------

    async def transition(
        self, task_uuid: str, action: str, *, error_message: str | None = None
    ) -> TaskView:
        layout = self.store.layout
        async with self.store.locked(task_uuid) as locked:
            task = locked.task
            target = lifecycle.next_status(action, task.status)
            head = await self.store.recovered_head(locked)
            await self.store.flush_held(task_uuid)  # the row below has every append's counts
            source_dir, target_dir = STATUS_DIRS[task.status], STATUS_DIRS[target]
            now = datetime.now(UTC)
            moved = False
            try:
                async with self.store.db.transaction() as session:
                    row = await session.get(Task, task_uuid)
                    assert row is not None
                    row.status = target
                    row.updated_at = now
                    if target in lifecycle.FINISHED:
                        row.completed_at = now
                        row.final_token_count = self.payload_tokens(
                            row, head, native_format(row.llm_provider)
                        )
                        row.final_message_count = head.current_messages
                    if target == "failed":
                        row.error_message = error_message
                    if target in lifecycle.FINISHED:  # threads end with their task
                        await session.execute(
                            update(Thread)
                            .where(Thread.task_uuid == task_uuid, Thread.status == "active")
                            .values(status="aborted", completed_at=now)
                        )
                    # Follow-up work commits with the transition: it survives a restart, and
                    # it runs after the answer, so a slow LLM or a dead receiver never holds it.
                    session.add_all(self._follow_ups(self.view(row, head), action))
                    if source_dir != target_dir:
                        # Moved inside the transaction: if the commit fails we move back; if the
                        # process dies first, startup reconciliation moves it back.
                        await asyncio.to_thread(layout.move, task_uuid, source_dir, target_dir)
                        moved = True
            except BaseException:
                if moved:
                    await asyncio.to_thread(layout.move, task_uuid, target_dir, source_dir)
                raise
            self.jobs.notify()
            log.info("task %s: %s -> %s", task_uuid, task.status, target)
            return self.view(row, head)

    def _follow_ups(self, view: TaskView, action: str) -> Sequence[Job]:
        """The jobs a transition queues: the final summary, and one delivery per webhook."""
        task = view.task
        jobs: list[Job] = []
        if task.status in lifecycle.FINISHED:
            jobs.append(self.jobs.new(task.uuid, "final_summary"))
        event = EVENTS.get(action)
        if event is not None:
            names = hooks_for(self.settings.webhook.hooks, task.hooks or [], event)
            record = task_out(view).model_dump(mode="json") if names else {}
            jobs += [
                self.jobs.new(
                    task.uuid,
                    "webhook",
                    params={"hook": name, "event": event, "task": record},
                    max_attempts=self.settings.webhook.max_attempts,
                )
                for name in names
            ]
        return jobs

    async def delete(self, task_uuid: str) -> None:
        try:
            await self._delete(task_uuid)
        except StorageError as exc:
            if exc.code != "task_files_missing":
                raise
            # Removed by hand (seed 000 §14.1 cleans old directories with rm -rf): the row goes.
            async with self.store.locks.hold(task_uuid):
                async with self.store.db.transaction() as session:
                    row = await session.get(Task, task_uuid)
                    if row is not None:
                        await session.delete(row)
                self.store.locks.discard(task_uuid)
            log.warning("task %s: deleted; its directory was already gone", task_uuid)

    async def _delete(self, task_uuid: str) -> None:
        layout = self.store.layout
        async with self.store.locked(task_uuid) as locked:
            source = STATUS_DIRS[locked.task.status]
            self.store.forget(task_uuid)
            await asyncio.to_thread(layout.move, task_uuid, source, ".trash")
            try:
                async with self.store.db.transaction() as session:
                    row = await session.get(Task, task_uuid)
                    await session.delete(row)
            except BaseException:
                await asyncio.to_thread(layout.move, task_uuid, ".trash", source)
                raise
            await asyncio.to_thread(
                shutil.rmtree, layout.location_dir(".trash", task_uuid), ignore_errors=True
            )
            self.store.locks.discard(task_uuid)
        log.info("task %s: deleted", task_uuid)


def _fingerprint(body: TaskCreate) -> str:
    # Options added since the first release count only when set, so a re-POST of a task
    # created before them still matches its stored fingerprint.
    later = {name for name in ("hooks", "pin_plan", "compaction") if not getattr(body, name)}
    data = body.model_dump(mode="json", exclude={"uuid", *later})
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
