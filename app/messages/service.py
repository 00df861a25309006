"""Appending messages and reading a task's history."""

import asyncio
from typing import Any, BinaryIO

import orjson

from app.config import Settings
from app.context.files import record_at
from app.context.store import ContextStore
from app.errors import ErrorCode, InvalidInput, MessageNotFound, TooLarge
from app.formats.parts import content_text, stand_in
from app.messages.schemas import (
    AppendResult,
    HistoryHit,
    HistorySearch,
    MessageIn,
    MessagePage,
    MessageRecord,
    MessageText,
    ToolCall,
)
from app.messages.text import message_text, snippet
from app.observability.metrics import Metrics
from app.storage.jsonl import iter_lines, offset_after_seq, read_page

SNIPPET_CHARS = 160
# A message's text is served at most this many bytes at a time (a range pages on beyond).
DEFAULT_TEXT_BYTES = 16_384
MAX_TEXT_BYTES = 262_144


class MessageService:
    def __init__(
        self, store: ContextStore, settings: Settings, *, metrics: Metrics | None = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics

    async def append(
        self,
        task_uuid: str,
        messages: list[MessageIn],
        idempotency_key: str | None,
        thread_id: int = 0,
    ) -> tuple[AppendResult, bool]:
        """Append messages, all or nothing; returns the result and whether it was a replay."""
        if len(messages) > self.settings.limits.max_batch_messages:
            raise TooLarge(
                f"a batch may hold at most {self.settings.limits.max_batch_messages} messages",
                code=ErrorCode.BATCH_TOO_LARGE,
                details={
                    "messages": len(messages),
                    "limit": self.settings.limits.max_batch_messages,
                },
            )
        response, replayed = await self.store.append(
            task_uuid, [m.fields() for m in messages], idempotency_key, thread_id
        )
        result = AppendResult.model_validate(response)
        if self.metrics is not None and not replayed:  # committed now; a replay appends nothing
            self.metrics.appended(len(result.seqs))
        return result, replayed

    async def history(
        self, task_uuid: str, after_seq: int, limit: int, thread_id: int = 0
    ) -> MessagePage:
        snapshot = await self.store.snapshot(task_uuid, "messages", thread_id)
        try:
            records = await asyncio.to_thread(
                read_page,
                snapshot.handle,
                "seq",
                after_seq,
                limit,
                snapshot.head.messages_bytes,
                self.settings.limits.max_page_bytes,
            )
        finally:
            snapshot.close()
        last_seq = snapshot.head.last_seq
        next_after = records[-1]["seq"] if records and records[-1]["seq"] < last_seq else None
        return MessagePage(
            messages=[MessageRecord.model_validate(r) for r in records],
            last_seq=last_seq,
            next_after_seq=next_after,
        )

    async def text(
        self,
        task_uuid: str,
        seq: int,
        start: int,
        end: int | None,
        max_bytes: int,
        thread_id: int = 0,
    ) -> MessageText:
        """Characters [start, end) of message ``seq``'s text as posted, at most ``max_bytes``
        of them in UTF-8: what the handle of a masked or elided span points at. The record is
        found by bisection on seq, so only its own line is read."""
        snapshot = await self.store.snapshot(task_uuid, "messages", thread_id)
        try:
            record = await asyncio.to_thread(
                record_at, snapshot.handle, seq, snapshot.head.messages_bytes
            )
        finally:
            snapshot.close()
        if record is None:
            raise MessageNotFound(task_uuid, thread_id, seq, snapshot.head.last_seq)
        return text_range(record, start, end, max_bytes)

    async def search(
        self, task_uuid: str, query: str, *, after_seq: int, limit: int, thread_id: int = 0
    ) -> HistorySearch:
        """The first ``limit`` messages after ``after_seq`` whose text holds ``query``, case
        ignored; messages.jsonl is read a line at a time, never whole."""
        snapshot = await self.store.snapshot(task_uuid, "messages", thread_id)
        try:
            hits = await asyncio.to_thread(
                _search,
                snapshot.handle,
                query,
                after_seq,
                limit,
                snapshot.head.messages_bytes,
            )
        finally:
            snapshot.close()
        return HistorySearch(
            query=query,
            hits=hits,
            next_after_seq=hits[-1].seq if len(hits) == limit else None,
        )


def text_range(record: dict[str, Any], start: int, end: int | None, max_bytes: int) -> MessageText:
    """The range of the record's text, cut to ``max_bytes`` (on a character boundary)."""
    # The text elision measures its cuts in (app/compaction/elision.py ``elided``), so that a
    # handle's character range means the same here.
    text = content_text(record.get("content"), non_text=stand_in)
    total = len(text)
    stop = total if end is None else min(end, total)
    if start > total or stop < start:
        raise InvalidInput(
            f"the range [{start}, {end}) is not within the text of seq {record['seq']}: start "
            f"must be at most {total} and end at least start",
            code=ErrorCode.INVALID_RANGE,
            details={"start": start, "end": end, "total_chars": total},
        )
    shown = text[start:stop]
    encoded = shown.encode()
    cut = len(encoded) > max_bytes
    if cut:  # a character the cap splits is left out whole
        shown = encoded[:max_bytes].decode(errors="ignore")
    returned_end = start + len(shown)
    return MessageText(
        seq=record["seq"],
        role=record.get("role"),
        tool_call_id=record.get("tool_call_id"),
        tool_name=record.get("tool_name"),
        marker=record.get("marker"),
        tool_calls=[ToolCall.model_validate(call) for call in record.get("tool_calls") or ()]
        or None,
        text=shown,
        total_chars=total,
        start=start,
        end=returned_end,
        cut=cut,
        next_start=returned_end if returned_end < stop else None,
    )


def _search(f: BinaryIO, query: str, after_seq: int, limit: int, end: int) -> list[HistoryHit]:
    needle = query.lower()
    hits: list[HistoryHit] = []
    for _, line in iter_lines(f, offset_after_seq(f, "seq", after_seq, end), end):
        record: dict[str, Any] = orjson.loads(line)
        text = message_text(record)
        at = text.lower().find(needle)
        if at < 0:
            continue
        hits.append(
            HistoryHit(
                seq=record["seq"],
                role=record.get("role"),
                timestamp=record["timestamp"],
                snippet=snippet(text, at, len(query), SNIPPET_CHARS),
            )
        )
        if len(hits) == limit:
            break
    return hits
