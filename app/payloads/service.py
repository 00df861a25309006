"""Assembling the LLM request and the context overview of a task."""

from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from app.budgets.service import Budgets, tools_tokens
from app.compaction.service import CompactionService
from app.context.store import ContextStore, LockedTask
from app.db.models import Task
from app.errors import Conflict, ErrorCode, TaskNotWritable, ThreadNotActive, TooLarge
from app.formats import FORMATS, PayloadFormat, provider_format
from app.payloads.assembly import Assembler, Assembly
from app.payloads.streaming import stream_lines, whole_body
from app.planning.pinning import with_pinned
from app.threads.anchors import with_anchors
from app.tokens.counters import TextCounter


@dataclass
class PayloadStream:
    """A payload and its headers: the whole body for a small context (up to 64 KiB, read as
    the snapshot was opened), else its chunks to stream."""

    body: bytes | AsyncIterator[bytes]
    headers: dict[str, str]

    async def read(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return b"".join([chunk async for chunk in self.body])


class PayloadService:
    def __init__(
        self, store: ContextStore, budgets: Budgets, compaction: CompactionService
    ) -> None:
        self.store = store
        self.budgets = budgets
        self.compaction = compaction
        self.assembler = Assembler(store, lambda task: budgets.budget(task).allowed)

    async def request(
        self, task_uuid: str, format_name: str | None, thread_id: int = 0
    ) -> PayloadStream:
        """The request payload of a context in a provider's format (default: the task's
        provider's); never over the budget as that format counts (TooLarge instead). A
        thread's own context is compacted within its own share; its ancestors' regions fit
        theirs."""
        assembly = await self.assembler.open(task_uuid, thread_id, format_name)
        name, counted_as = assembly.format, assembly.counted_as
        for _ in range(3):  # appends may race the compaction; each round re-checks
            context, head = assembly.context, assembly.snapshot.head
            tokens = self.budgets.context_tokens(context, head, counted_as)
            if tokens <= self.budgets.context_budget(context).allowed:
                break
            if context.task.status != "running" or _ended(context):
                break
            assembly.snapshot.close()
            # Paused, ended or aborted meanwhile: served as it is, like one found so.
            with suppress(TaskNotWritable, ThreadNotActive):
                await self.compaction.fit(task_uuid, counted_as, thread_id=thread_id)
            assembly = await self.assembler.open(task_uuid, thread_id, name)
        snapshot = assembly.snapshot
        try:
            tokens, headers = self._check_servable(assembly, counted_as)
            # The LLM's report is about the payload the agent sent it: one in the format of the
            # task's provider (a dashboard's look in another format is no evidence), of the
            # root context.
            task = snapshot.task
            # Only the root's: one number per task, and a thread's payload is another context.
            evidence = (
                task.status == "running"
                and name == provider_format(task.llm_provider)
                and not assembly.context.thread_id
            )
            if evidence and task.served_tokens != tokens:  # a write only when it changes
                await self.store.record_served(task_uuid, tokens)
        except BaseException:
            snapshot.close()
            raise
        payload_format = FORMATS[name]
        prefix, suffix = payload_format.envelope(
            snapshot.metadata,
            max_output_tokens=snapshot.task.max_output_tokens,
            context_length=snapshot.task.context_length,
        )
        render = with_pinned(
            with_anchors(payload_format.renderer(snapshot.metadata), assembly.anchors),
            assembly.pinned_line,
        )
        size = snapshot.head.current_bytes
        try:
            whole = whole_body(snapshot, size, prefix, suffix, render, lead=assembly.lead)
        except BaseException:
            snapshot.close()
            raise
        if whole is not None:
            snapshot.close()
            return PayloadStream(body=whole, headers=headers)
        body = stream_lines(snapshot, size, prefix, suffix, render, lead=assembly.lead)
        return PayloadStream(body=body, headers=headers)

    def _check_servable(self, assembly: Assembly, counted_as: str) -> tuple[int, dict[str, str]]:
        context, head = assembly.context, assembly.snapshot.head
        task = context.task
        budget = self.budgets.context_budget(context)
        own = self.budgets.context_tokens(context, head, counted_as)
        if head.current_messages == 0 and not assembly.protected:
            raise Conflict(
                f"task {task.uuid} has no messages yet", code=ErrorCode.CONTEXT_EMPTY, details={}
            )
        if own > budget.allowed:
            raise TooLarge(
                f"the context has {own} tokens; the budget is {budget.allowed}",
                code=ErrorCode.CONTEXT_OVER_BUDGET,
                details={"tokens": own, "budget": budget.allowed, "window": budget.window},
            )
        tokens = own + assembly.protected_tokens
        headers = {
            "X-Context-Tokens": str(tokens),
            "X-Context-Budget": str(self.budgets.budget(task).allowed),
            "X-Token-Counter": self._counter(task).name,
            "X-Token-Calibration": str(task.token_calibration),
        }
        if context.thread_id:
            headers |= {
                "X-Thread-Tokens": str(own),
                "X-Thread-Budget": str(budget.allowed),
                "X-Protected-Tokens": str(assembly.protected_tokens),
            }
        return tokens, headers

    def _counter(self, task: Task) -> TextCounter:
        return self.store.costs(task).counter

    async def context_view(
        self, task_uuid: str, format_name: str | None, thread_id: int = 0
    ) -> AsyncIterator[bytes]:
        """A context with per-message tokens, budget and what would happen next (a thread's
        with its ancestors' protected messages first)."""
        assembly = await self.assembler.open(task_uuid, thread_id, format_name)
        snapshot = assembly.snapshot
        try:
            overview = await self._overview(assembly)
        except BaseException:
            snapshot.close()
            raise
        overview["protected"] = [
            {
                "thread_id": p.thread_id,
                "tokens": p.tokens,
                "message": orjson.Fragment(p.line.rstrip()),
            }
            for p in assembly.protected
        ]
        prefix = orjson.dumps(overview)[:-1] + b',"messages":['
        entries = _ContextEntries(self._counter(snapshot.task), FORMATS[assembly.format])
        return stream_lines(
            snapshot,
            snapshot.head.current_bytes,
            prefix,
            b"]}",
            with_pinned(with_anchors(entries, assembly.anchors), assembly.pinned_line),
            offload=True,
        )

    async def budget_view(
        self, task_uuid: str, format_name: str | None, thread_id: int = 0
    ) -> dict[str, Any]:
        """What :meth:`context_view` opens with (tokens, budget, threshold, window and a dry run
        of the next compaction), without the messages."""
        assembly = await self.assembler.open(task_uuid, thread_id, format_name)
        try:
            return await self._overview(assembly)
        finally:
            assembly.snapshot.close()

    async def _overview(self, assembly: Assembly) -> dict[str, Any]:
        counted_as = assembly.counted_as
        context, head = assembly.context, assembly.snapshot.head
        task = context.task
        next_step = await self.compaction.dry_run(
            task.uuid, counted_as, thread_id=context.thread_id
        )
        budget = self.budgets.context_budget(context)
        tokens = self.budgets.context_tokens(context, head, counted_as)
        return {
            "uuid": task.uuid,
            "thread_id": context.thread_id,
            "format": assembly.format,
            "tokens": tokens,
            "budget": budget.allowed,
            "threshold": budget.threshold,
            "window": budget.window,
            "reserved_output": budget.reserved_output,
            "tools_tokens": tools_tokens(task, counted_as),
            "token_counter": task.token_counter,
            "calibration": {
                "factor": task.token_calibration,
                "samples": task.calibration_samples,
                "estimated_real_tokens": round(tokens * task.token_calibration),
            },
            "compaction": asdict(self.budgets.compaction_options(task)),
            "next_action": budget.next_action(tokens),
            "next_step": next_step,
            "message_count": head.current_messages,
            "last_seq": head.last_seq,
            "protected_tokens": assembly.protected_tokens,
        }


def _ended(context: LockedTask) -> bool:
    return context.thread is not None and context.thread.status != "active"


class _ContextEntries:
    """Renders current.jsonl lines as {"index", "tokens", "message"} array items."""

    def __init__(self, counter: TextCounter, payload_format: PayloadFormat) -> None:
        self.counter = counter
        self.format = payload_format
        self.index = 0

    def __call__(self, chunk: bytes, last: bool) -> bytes:
        items = []
        for line in chunk.split(b"\n")[:-1]:
            message: dict[str, Any] = orjson.loads(line)
            tokens = self.format.message_tokens(self.counter, message)
            items.append(b'{"index":%d,"tokens":%d,"message":%s}' % (self.index, tokens, line))
            self.index += 1
        rendered = b",".join(items)
        return rendered if self.index == len(items) else b"," + rendered
