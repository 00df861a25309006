"""Assembling the LLM request and the context overview of a task."""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from app.compaction.service import CompactionService
from app.context.store import ContextStore, Snapshot
from app.db.models import Task
from app.errors import Conflict, TooLarge
from app.formats import FORMATS, PayloadFormat, counting_format, provider_format
from app.payloads.streaming import stream_lines
from app.planning.pinning import pinned_line, with_pinned
from app.tasks.service import TaskService, tools_tokens
from app.tokens.counters import TextCounter


@dataclass
class PayloadStream:
    body: AsyncIterator[bytes]
    headers: dict[str, str]


class PayloadService:
    def __init__(
        self, store: ContextStore, tasks: TaskService, compaction: CompactionService
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.compaction = compaction

    async def request(self, task_uuid: str, format_name: str | None) -> PayloadStream:
        """The request payload in a provider's format (default: the task's provider's);
        never over the task's budget as that format counts (SPEC §3.3)."""
        snapshot = await self.store.snapshot(task_uuid, "current")
        name = format_name or provider_format(snapshot.task.llm_provider)
        counted_as = counting_format(name)
        for _ in range(3):  # appends may race the compaction; each round re-checks
            task, head = snapshot.task, snapshot.head
            tokens = self.tasks.payload_tokens(task, head, counted_as)
            if tokens <= self.tasks.budget(task).allowed or task.status != "running":
                break
            snapshot.close()
            await self.compaction.fit(task_uuid, counted_as)
            snapshot = await self.store.snapshot(task_uuid, "current")
        try:
            tokens, headers = self._check_servable(snapshot, counted_as)
            # The LLM's report is about the payload the agent sent it: one in the format of the
            # task's provider (a dashboard's look in another format is no evidence).
            task = snapshot.task
            evidence = task.status == "running" and name == provider_format(task.llm_provider)
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
        render = with_pinned(payload_format.renderer(), pinned_line(snapshot.task))
        body = stream_lines(snapshot, snapshot.head.current_bytes, prefix, suffix, render)
        return PayloadStream(body=body, headers=headers)

    def _check_servable(self, snapshot: Snapshot, counted_as: str) -> tuple[int, dict[str, str]]:
        task, head = snapshot.task, snapshot.head
        budget = self.tasks.budget(task)
        tokens = self.tasks.payload_tokens(task, head, counted_as)
        if head.current_messages == 0:
            raise Conflict(
                f"task {task.uuid} has no messages yet", code="context_empty", details={}
            )
        if tokens > budget.allowed:
            raise TooLarge(
                f"the context has {tokens} tokens; the budget is {budget.allowed}",
                code="context_over_budget",
                details={"tokens": tokens, "budget": budget.allowed, "window": budget.window},
            )
        return tokens, {
            "X-Context-Tokens": str(tokens),
            "X-Context-Budget": str(budget.allowed),
            "X-Token-Counter": self._counter(task).name,
            "X-Token-Calibration": str(task.token_calibration),
        }

    def _counter(self, task: Task) -> TextCounter:
        return self.store.counting.counter(task.token_counter)

    async def context_view(self, task_uuid: str, format_name: str | None) -> AsyncIterator[bytes]:
        """The effective context with per-message tokens, budget and what would happen next."""
        snapshot = await self.store.snapshot(task_uuid, "current")
        task, head = snapshot.task, snapshot.head
        name = format_name or provider_format(task.llm_provider)
        counted_as = counting_format(name)
        try:
            next_step = await self.compaction.dry_run(task_uuid, counted_as)
        except BaseException:
            snapshot.close()
            raise
        budget = self.tasks.budget(task)
        tokens = self.tasks.payload_tokens(task, head, counted_as)
        overview = {
            "uuid": task.uuid,
            "format": name,
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
            "next_action": budget.next_action(tokens),
            "next_step": next_step,
            "message_count": head.current_messages,
            "last_seq": head.last_seq,
        }
        prefix = orjson.dumps(overview)[:-1] + b',"messages":['
        return stream_lines(
            snapshot,
            head.current_bytes,
            prefix,
            b"]}",
            with_pinned(_ContextEntries(self._counter(task), FORMATS[name]), pinned_line(task)),
            offload=True,
        )


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
