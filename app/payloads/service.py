"""Assembling the LLM request and the context overview of a task."""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from app.compaction.service import CompactionService
from app.context.store import ContextStore, Snapshot
from app.errors import Conflict, TooLarge
from app.payloads import openai
from app.payloads.streaming import stream_lines
from app.tasks.service import TaskService
from app.tokens.accounting import PER_PAYLOAD, message_tokens
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

    async def request(self, task_uuid: str, fmt: str) -> PayloadStream:
        """The request payload in ``fmt``; never over the task's budget (SPEC §3.3)."""
        snapshot = await self.store.snapshot(task_uuid, "current")
        for _ in range(3):  # appends may race the compaction; each round re-checks
            task, head = snapshot.task, snapshot.head
            tokens = head.context_tokens + task.tools_tokens + PER_PAYLOAD
            if tokens <= self.tasks.budget(task).allowed or task.status != "running":
                break
            snapshot.close()
            await self.compaction.fit(task_uuid)
            snapshot = await self.store.snapshot(task_uuid, "current")
        try:
            headers = self._check_servable(snapshot)
        except BaseException:
            snapshot.close()
            raise
        prefix, suffix = openai.envelope(snapshot.metadata, snapshot.task.max_output_tokens)
        body = stream_lines(
            snapshot,
            snapshot.head.current_bytes,
            prefix,
            suffix,
            lambda chunk, last: openai.join_lines(chunk, last=last),
        )
        return PayloadStream(body=body, headers=headers)

    def _check_servable(self, snapshot: Snapshot) -> dict[str, str]:
        task, head = snapshot.task, snapshot.head
        budget = self.tasks.budget(task)
        tokens = head.context_tokens + task.tools_tokens + PER_PAYLOAD
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
        return {
            "X-Context-Tokens": str(tokens),
            "X-Context-Budget": str(budget.allowed),
            "X-Token-Counter": self.store.counter.name,
        }

    async def context_view(self, task_uuid: str) -> AsyncIterator[bytes]:
        """The effective context with per-message tokens, budget and what would happen next."""
        next_step = await self.compaction.dry_run(task_uuid)
        snapshot = await self.store.snapshot(task_uuid, "current")
        task, head = snapshot.task, snapshot.head
        budget = self.tasks.budget(task)
        tokens = head.context_tokens + task.tools_tokens + PER_PAYLOAD
        overview = {
            "uuid": task.uuid,
            "tokens": tokens,
            "budget": budget.allowed,
            "threshold": budget.threshold,
            "window": budget.window,
            "reserved_output": budget.reserved_output,
            "tools_tokens": task.tools_tokens,
            "token_counter": self.store.counter.name,
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
            _ContextEntries(self.store.counter),
            offload=True,
        )


class _ContextEntries:
    """Renders current.jsonl lines as {"index", "tokens", "message"} array items."""

    def __init__(self, counter: TextCounter) -> None:
        self.counter = counter
        self.index = 0

    def __call__(self, chunk: bytes, last: bool) -> bytes:
        items = []
        for line in chunk.split(b"\n")[:-1]:
            message: dict[str, Any] = orjson.loads(line)
            tokens = message_tokens(self.counter, message)
            items.append(b'{"index":%d,"tokens":%d,"message":%s}' % (self.index, tokens, line))
            self.index += 1
        rendered = b",".join(items)
        return rendered if self.index == len(items) else b"," + rendered
