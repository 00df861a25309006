"""Gathering what a context's payload is made of, under the task lock.

The root context (thread 0) is its current.jsonl. A thread's payload is, first, the protected
region of each context above it, root first (the region of the parent keeps the parent's
latest exchanges, the root's the user's conversation), then its own current.jsonl. The shares
come from the task's budget: a thread's own budget is the budget times the ratios down its
chain, each ancestor keeps the rest of its own share, and together they fit the budget.

Anchors are rendered here for the one who looks (app/threads/anchors.py): those in the
protected regions as the regions are read, those in the context's own lines ahead of the
stream (a context has few children).
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.budgets.windows import ROOT, chain_of, chain_ratios, protected_shares
from app.compaction.elision import elided
from app.context.files import ContextFiles
from app.context.records import ANCHOR_TOKENS, HeadState
from app.context.store import ContextStore, LockedTask, Snapshot
from app.db.models import Task, Thread
from app.formats import counting_format, provider_format
from app.formats.costs import TokenCosts, in_format
from app.formats.parts import content_text, stand_in
from app.planning.pinning import pinned_line
from app.storage.jsonl import iter_lines_backward
from app.storage.layout import context_dir
from app.threads.anchors import AnchorFacts, anchor_id, rendered_line, seen_from_inside
from app.threads.protected import protected_region

LATEST_EXCHANGES = 3
MESSAGE_SHARE = 4  # no message takes more than a quarter of a protected region
_EXCHANGE_SCAN = 40  # lines read back from a thread's end to find its latest exchanges
_TAIL_CHUNK = 16 << 10  # every child's tail is read for each payload of its parent: small reads


@dataclass
class ProtectedLine:
    thread_id: int  # the ancestor whose context it comes from
    line: bytes
    tokens: int


@dataclass
class Assembly:
    """A context's payload parts; the caller streams and then closes the snapshot."""

    snapshot: Snapshot  # the context's own current.jsonl
    format: str  # the payload format
    counted_as: str  # whose counts it follows
    protected: list[ProtectedLine] = field(default_factory=list)
    anchors: dict[int, bytes] = field(default_factory=dict)  # renderings for its own lines

    @property
    def context(self) -> LockedTask:
        return self.snapshot.context

    @property
    def pinned_line(self) -> bytes | None:
        """The task's pinned plan, for the root's payload only (see Budgets.context_tokens)."""
        return None if self.context.thread_id else pinned_line(self.context.task)

    @property
    def lead(self) -> bytes:
        return b"".join(p.line for p in self.protected)

    @property
    def protected_tokens(self) -> int:
        return sum(p.tokens for p in self.protected)


class Assembler:
    def __init__(self, store: ContextStore, budget_allowed: Callable[[Task], int]) -> None:
        self.store = store
        self.budget_allowed = budget_allowed  # the task's whole budget, in counted tokens

    async def open(self, task_uuid: str, thread_id: int, format_name: str | None) -> Assembly:
        """A context's payload parts in ``format_name`` (default: its task's provider's)."""
        async with self.store.locked(
            task_uuid, thread_id, with_threads=True, opening_current=True
        ) as locked:
            name = format_name or provider_format(locked.task.llm_provider)
            snapshot = await self.store.open_snapshot(locked, "current")
            try:
                return await self._gather(Assembly(snapshot, name, counting_format(name)))
            except BaseException:
                snapshot.close()
                raise

    async def _gather(self, assembly: Assembly) -> Assembly:
        locked, fmt = assembly.context, assembly.counted_as
        threads = locked.threads
        if not threads:  # a task without threads: nothing to render, nothing above it
            return assembly
        heads = await self.store.heads(locked.task.uuid)
        task_dir = self.store.task_dir(locked.task)
        costs = self.store.costs(locked.task)
        renderer = _AnchorRenderer(task_dir, threads, heads, costs, fmt, viewer=locked.thread_id)
        children = [t for t in threads.values() if t.parent_thread_id == locked.thread_id]
        assembly.anchors = await asyncio.to_thread(
            lambda: {c.thread_id: renderer.line(c.thread_id) for c in children}
        )
        chain = chain_of(locked.thread_id, threads)
        shares = protected_shares(
            self.budget_allowed(locked.task), chain_ratios(locked.thread_id, threads)
        )
        for ancestor, share in zip([ROOT, *chain][:-1], shares, strict=True):
            context = await self.store.other_context(locked, ancestor)
            lines = await asyncio.to_thread(
                _protected_lines, self.store.files(context).current, context.head, share, renderer
            )
            assembly.protected += [ProtectedLine(ancestor, line, n) for line, n in lines]
        return assembly


def _protected_lines(
    path: Path, head: HeadState, share: int, renderer: "_AnchorRenderer"
) -> list[tuple[bytes, int]]:
    """An ancestor's region, each message at most 1/MESSAGE_SHARE of it (cut in the middle
    if larger: a pasted log or a large tool result must not push the request out)."""
    cap = max(share // MESSAGE_SHARE, 1)
    with open(path, "rb") as f:
        region = protected_region(
            f,
            head.current_bytes,
            share,
            lambda line: renderer.capped(line, cap),
            calls_open=bool(head.open_tool_calls),
            keep_head=True,
        )
    return region.entries


class _AnchorRenderer:
    """Anchors as one viewer sees them, and what any line costs in the payload's format.
    Blocking (reads the latest lines of threads): call from a worker thread."""

    def __init__(
        self,
        task_dir: Path,
        threads: dict[int, Thread],
        heads: dict[int, HeadState],
        costs: TokenCosts,
        fmt: str,
        *,
        viewer: int,
    ) -> None:
        self.task_dir = task_dir
        self.threads = threads
        self.heads = heads
        self.costs = costs
        self.fmt = fmt
        self.viewer = viewer
        self._lines: dict[int, bytes] = {}

    def cost(self, message: dict[str, Any]) -> int:
        return in_format(*self.costs.message(message), self.fmt)

    def line(self, thread_id: int) -> bytes:
        if thread_id not in self._lines:
            full = not seen_from_inside(self.viewer, thread_id, self.threads)
            self._lines[thread_id] = rendered_line(
                self._facts(thread_id), full=full, fits=lambda m: self.cost(m) <= ANCHOR_TOKENS
            )
        return self._lines[thread_id]

    def capped(self, line: bytes, cap: int) -> tuple[bytes, int]:
        """A current.jsonl line as sent (an anchor rendered; content cut in the middle to cost
        at most about ``cap``) and its cost."""
        thread_id = anchor_id(line)
        if thread_id is not None:
            line = self.line(thread_id)
        message = orjson.loads(line)
        tokens = self.cost(message)
        for _ in range(3):  # an elision lands near its target; a second or third gets under
            if tokens <= cap or not message.get("content"):
                break
            message["content"] = elided(self.costs.counter, message["content"], tokens - cap)
            line = orjson.dumps(message) + b"\n"
            tokens = self.cost(message)
        return line, tokens

    def _facts(self, thread_id: int) -> AnchorFacts:
        thread = self.threads[thread_id]
        return AnchorFacts(
            thread_id=thread_id,
            label=thread.label,
            status=thread.status,
            created_at=thread.created_at,
            completed_at=thread.completed_at,
            message_count=thread.message_count,
            chronicle=thread.chronicle_summary,
            exchanges=self._exchanges(thread_id),
        )

    def _exchanges(self, thread_id: int) -> list[tuple[str, str]]:
        """The thread's latest user/assistant messages with text, oldest first."""
        head = self.heads.get(thread_id)
        path = ContextFiles(context_dir(self.task_dir, thread_id)).current
        if head is None or not path.exists():
            return []
        found: list[tuple[str, str]] = []
        with open(path, "rb") as f:
            end = min(head.current_bytes, f.seek(0, 2))
            lines = iter_lines_backward(f, end, chunk=_TAIL_CHUNK)
            for scanned, line in enumerate(lines):
                if len(found) == LATEST_EXCHANGES or scanned == _EXCHANGE_SCAN:
                    break
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                text = content_text(message.get("content"), non_text=stand_in).strip()
                if message.get("role") in ("user", "assistant") and text:
                    found.insert(0, (message["role"], text))
        return found
