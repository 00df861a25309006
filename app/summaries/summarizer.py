"""Summaries of a span of the context: the extractive digest, or a chat backend's summary.

With a chat backend, a span larger than the backend's own window is summarised in chunks and
the partial summaries are combined by one more call. A summary with a limit (a condense's share
of the context's budget) is at most that long whatever the backend: the digest is sized to it,
a chat backend is asked for no more, and an answer still longer is cut on a line boundary, with
a note that says so.
"""

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.config import DEFAULT_BACKEND, EXTRACTIVE
from app.context.files import RecordSpan
from app.context.records import openai_message
from app.errors import ErrorCode, InvalidInput
from app.formats.parts import content_text
from app.llm.base import ChatBackend
from app.planning.items import ChecklistItem, render_items
from app.summaries.digest import extractive_digest
from app.summaries.limited import (
    SpanDigest,
    SummaryLimit,
    cut_to_fit,
    limited_digest,
    span_digest,
)
from app.summaries.processes import SummaryProcesses
from app.tokens.accounting import content_tokens, message_tokens
from app.tokens.counters import TextCounter

log = logging.getLogger(__name__)

# Roo Code's SUMMARY_PROMPT (six sections): the default condense prompt.
DEFAULT_PROMPT = """\
Your task is to create a detailed summary of the conversation so far, paying close attention \
to the user's explicit requests and your previous actions.
This summary should be thorough in capturing technical details, code patterns, and \
architectural decisions that would be essential for continuing with the conversation and \
supporting any continuing tasks.

Your summary should be structured as follows:
Context: The context to continue the conversation with. If applicable based on the current \
task, this should include:
  1. Previous Conversation: High level details about what was discussed throughout the \
entire conversation with the user.
  2. Current Work: Describe in detail what was being worked on prior to this request to \
summarize the conversation. Pay special attention to the more recent messages.
  3. Key Technical Concepts: List all important technical concepts, technologies, coding \
conventions, and frameworks discussed.
  4. Relevant Files and Code: Enumerate specific files and code sections examined, modified, \
or created. Pay special attention to the most recent messages and changes.
  5. Problem Solving: Document problems solved thus far and any ongoing troubleshooting.
  6. Pending Tasks and Next Steps: Outline all pending tasks and the next steps, with direct \
quotes from the most recent conversation showing exactly where you left off.

Output only the summary of the conversation so far, without any additional commentary or \
explanation."""

FINAL_REQUEST = "Summarize the conversation so far, as described in the prompt instructions."
COMBINE_REQUEST = (
    "These are summaries of consecutive parts of one conversation, oldest first. Combine them "
    "into one summary in the same structure, keeping every file, error and pending task."
)
# The first user message goes with the span for reference: the context keeps it, so the
# summary can say what the work was for without retelling it.
KEPT_LABEL = "The first user message (the task), kept in the context, for reference"
# The plan items as the agent recorded them go with every request: the summary reports
# progress against them and must not revive finished work as next steps.
PLAN_LABEL = (
    "The current plan, as recorded, is given below; report progress against it; never list "
    "done ([x]) or cancelled ([-]) items as next steps"
)
EXTRACTIVE_MAX_CHARS = 6000
_WINDOW_SHARE = 0.6  # of the backend's window a chunk may fill; the rest is prompt and answer


@dataclass(frozen=True)
class SummaryRequest:
    """What a summary is asked for: the prompt, its length, the message the context keeps
    (given for reference, not summarised), the limit it must fit, the current plan items."""

    prompt: str
    max_tokens: int | None = None
    kept: dict[str, Any] | None = None
    limit: SummaryLimit | None = None
    plan: Sequence[ChecklistItem] | None = None


class SummaryBackend(Protocol):
    """One way to summarise: the extractive digest, or a chat backend."""

    @property
    def label(self) -> str:
        """What it is, as summaries record it: "extractive" or "openai:gpt-4o-mini"."""
        ...

    async def summarize(self, records: Iterable[dict[str, Any]], request: SummaryRequest) -> str:
        """A summary of the records (consumed once, in a worker thread; a condense's span may be
        read by a summariser process instead)."""
        ...


class ExtractiveSummaries:
    """The extractive digest (no LLM): sized to the limit, or to about four characters a token
    asked for. With ``processes``, a condense's span (a :class:`RecordSpan`) is digested in one
    of them, which reads the file itself; anything else in a worker thread."""

    label = EXTRACTIVE

    def __init__(self, processes: SummaryProcesses | None = None) -> None:
        self.processes = processes

    async def summarize(self, records: Iterable[dict[str, Any]], request: SummaryRequest) -> str:
        limit = request.limit
        if limit is not None:
            if self.processes is not None and isinstance(records, RecordSpan):
                job = SpanDigest(
                    records.path,
                    records.end,
                    records.low,
                    records.high,
                    limit.tokens,
                    limit.counter.name,
                    request.kept,
                    tuple(request.plan) if request.plan is not None else None,
                )
                try:
                    return await self.processes.run(span_digest, job)
                except OSError as exc:  # the directory moved (a status change): read it here
                    log.info("digest read here, not by path: %s", exc)
            return await asyncio.to_thread(
                limited_digest, records, limit, kept=request.kept, plan=request.plan
            )
        max_chars = 4 * request.max_tokens if request.max_tokens else EXTRACTIVE_MAX_CHARS
        return await asyncio.to_thread(
            extractive_digest, records, max_chars=max_chars, kept=request.kept, plan=request.plan
        )


class ChatSummaries:
    """A chat backend's summary: a span larger than its window in chunks, the partial
    summaries combined by one more call."""

    def __init__(self, chat: ChatBackend, counter: TextCounter, max_tokens: int) -> None:
        self.chat = chat
        self.counter = counter
        self.max_tokens = max_tokens
        self.label = f"{chat.kind}:{chat.model}"

    async def summarize(self, records: Iterable[dict[str, Any]], request: SummaryRequest) -> str:
        chat, limit = self.chat, request.limit
        max_tokens = request.max_tokens or self.max_tokens
        if limit is not None:
            max_tokens = min(max_tokens, limit.tokens)
        budget = max(int(chat.window * _WINDOW_SHARE) - max_tokens, 256)
        # The kept message, at most a quarter of a request (a pasted log keeps its start).
        reference, size = (None, 0)
        if request.kept is not None:
            reference, size = _fitted(openai_message(request.kept), self.counter, budget // 4)
        checklist, plan_size = (None, 0)
        if request.plan:  # at most a quarter of a request too (the cut is marked)
            checklist, plan_size = _fitted(_plan_message(request.plan), self.counter, budget // 4)
        size += plan_size
        parts: list[str] = []
        chunks = _chunks(records, self.counter, budget - size)
        while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
            messages = _request(request.prompt, chunk, reference, checklist)
            parts.append(await chat.complete(messages, max_tokens=max_tokens))
        while len(parts) > 1:  # combined in rounds of groups that fit the window
            groups = _groups(parts, self.counter, budget - size)
            parts = [
                await _combine(chat, group, request.prompt, max_tokens, reference, checklist)
                for group in groups
            ]
        return parts[0] if limit is None else cut_to_fit(parts[0], limit)


class Summarizer:
    """The summary backends by name: "extractive" and every configured chat backend."""

    def __init__(
        self,
        *,
        backends: dict[str, ChatBackend],
        counter: TextCounter,
        prompt: str,
        backend_name: str,
        max_tokens: int,
        processes: SummaryProcesses | None = None,
    ) -> None:
        self.backends: dict[str, SummaryBackend] = {EXTRACTIVE: ExtractiveSummaries(processes)}
        for name, chat in backends.items():
            # The summariser's window is the LLM's; what it costs is counted like a task's.
            self.backends[name] = ChatSummaries(chat, counter, max_tokens)
        self.prompt = prompt if prompt.strip() else DEFAULT_PROMPT  # blanks are no prompt
        self.backend_name = backend_name or DEFAULT_BACKEND

    def backend(self, name: str | None = None) -> SummaryBackend:
        """The backend ``name`` names (None: the server's choice, which is the extractive
        digest when that backend is not configured)."""
        chosen = name or self.backend_name
        if chosen not in self.backends and name is not None:
            raise InvalidInput(
                f"no LLM backend named {name!r} is configured",
                code=ErrorCode.UNKNOWN_BACKEND,
                details={"configured": sorted(self.backends)},
            )
        return self.backends.get(chosen) or self.backends[EXTRACTIVE]

    def describe(self, name: str | None = None) -> str:
        """Which summariser ``name`` resolves to, e.g. "extractive" or "openai:gpt-4o-mini"."""
        return self.backend(name).label

    async def summarize(
        self,
        records: Iterable[dict[str, Any]],
        backend: str | None = None,
        *,
        prompt: str | None = None,
        max_tokens: int | None = None,
        kept: dict[str, Any] | None = None,
        limit: SummaryLimit | None = None,
        plan: Sequence[ChecklistItem] | None = None,
    ) -> str:
        """A summary of the records (consumed once, in a worker thread, or read by a summariser
        process when they are a condense's span), with the condense prompt unless another is
        given (the final summary's). ``kept``, a message the context
        keeps (the task statement), is given along, marked as kept, not to be summarised;
        ``plan``, the current plan items, is given as recorded. With a ``limit``, the summary
        is at most that long, and a chat backend is asked for at most it."""
        request = SummaryRequest(
            prompt=prompt if prompt and prompt.strip() else self.prompt,
            max_tokens=max_tokens,
            kept=kept,
            limit=limit,
            plan=plan,
        )
        return await self.backend(backend).summarize(records, request)


async def _combine(
    chat: ChatBackend,
    parts: list[str],
    prompt: str,
    max_tokens: int,
    kept: dict[str, Any] | None,
    plan: dict[str, Any] | None = None,
) -> str:
    if len(parts) == 1:
        return parts[0]
    combined = "\n\n".join(f"Part {i + 1}:\n{part}" for i, part in enumerate(parts))
    messages = [
        {"role": "system", "content": prompt},
        *_kept_turn(kept),
        *_plan_turn(plan),
        {"role": "user", "content": f"{COMBINE_REQUEST}\n\n{combined}"},
    ]
    return await chat.complete(messages, max_tokens=max_tokens)


def _groups(parts: list[str], counter: TextCounter, budget: int) -> list[list[str]]:
    """Consecutive parts in groups of at most ``budget`` tokens, at least two a group (so
    each round shrinks), unless only one is left."""
    groups: list[list[str]] = []
    size = 0
    for part in parts:
        tokens = counter.count_text(part)
        if groups and (len(groups[-1]) < 2 or size + tokens <= budget):
            groups[-1].append(part)
            size += tokens
        else:
            groups.append([part])
            size = tokens
    return groups


def _request(
    prompt: str,
    chunk: list[dict[str, Any]],
    kept: dict[str, Any] | None,
    plan: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The request for one chunk; the kept message, if any, before it; the plan, if any,
    after it."""
    if "{messages}" in prompt:  # the original design's form: the messages inside the prompt
        lines = [f"[{KEPT_LABEL}]: {_text(kept)}"] if kept is not None else []
        lines += [f"[{m['role'].upper()}]: {_text(m)}" for m in chunk]
        lines += [_text(plan)] if plan is not None else []
        return [{"role": "user", "content": prompt.replace("{messages}", "\n".join(lines))}]
    # As Roo Code asks: the prompt as system, the conversation as it was, then the request.
    body = [{"role": _chat_role(m), "content": _text(m)} for m in chunk]
    return [
        {"role": "system", "content": prompt},
        *_kept_turn(kept),
        *body,
        *_plan_turn(plan),
        _final_request(),
    ]


def _kept_turn(kept: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [] if kept is None else [{"role": "user", "content": f"[{KEPT_LABEL}]\n{_text(kept)}"}]


def _plan_message(plan: Sequence[ChecklistItem]) -> dict[str, Any]:
    return {"role": "user", "content": f"[{PLAN_LABEL}]\n{render_items(plan)}"}


def _plan_turn(plan: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [] if plan is None else [plan]


def _final_request() -> dict[str, Any]:
    return {"role": "user", "content": FINAL_REQUEST}


def _chat_role(message: dict[str, Any]) -> str:
    return "assistant" if message["role"] == "assistant" else "user"


def _text(message: dict[str, Any]) -> str:
    """A message as plain text: tool calls and results spelled out."""
    content = message.get("content")
    # A string, even empty, is a line; no content (None, no parts) is none.
    parts = [content_text(content, non_text=_kind)] if isinstance(content, str) or content else []
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(f"[tool call {function.get('name')}: {function.get('arguments')}]")
    if message["role"] == "tool":
        name = message.get("tool_name") or message.get("tool_call_id")
        return f"[tool result {name}]: " + "\n".join(parts)
    return "\n".join(parts)


def _kind(part: dict[str, Any]) -> str:
    """A part with no text, as the request shows it: its type ("[image_url]")."""
    return f"[{part.get('type')}]"


def _chunks(
    records: Iterable[dict[str, Any]], counter: TextCounter, budget: int
) -> Iterator[list[dict[str, Any]]]:
    """Consecutive groups of messages of at most ``budget`` tokens (a huge one is cut)."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for record in records:
        message = openai_message(record) | {"tool_name": record.get("tool_name")}
        message, tokens = _fitted(message, counter, budget)
        if chunk and size + tokens > budget:
            yield chunk
            chunk, size = [], 0
        chunk.append(message)
        size += tokens
    if chunk:
        yield chunk


def _fitted(
    message: dict[str, Any], counter: TextCounter, budget: int
) -> tuple[dict[str, Any], int]:
    """The message and its tokens; one larger than ``budget`` as its start only."""
    tokens = message_tokens(counter, message)
    if tokens <= budget:
        return message, tokens
    text = _text(message)
    keep = max(1, len(text) * budget // max(1, content_tokens(counter, text)) // 2)
    return {"role": message["role"], "content": text[:keep] + "\n[... cut ...]"}, budget // 2
