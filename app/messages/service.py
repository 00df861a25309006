"""Appending messages and reading a task's history."""

import asyncio
from typing import Any, BinaryIO

import orjson

from app.config import Settings
from app.context.store import ContextStore
from app.errors import ErrorCode, MessageNotFound, TooLarge
from app.messages.schemas import (
    AppendResult,
    HistoryHit,
    HistorySearch,
    MessageIn,
    MessagePage,
    MessageRecord,
    RecalledMessage,
)
from app.messages.text import excerpt, message_text, snippet
from app.observability.metrics import Metrics
from app.storage.jsonl import iter_lines, offset_after_seq, read_page, read_record

RECALL_MAX_BYTES = 32 * 1024  # the most text one recall returns, whatever range is asked
SNIPPET_CHARS = 160


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

    async def recall(
        self, task_uuid: str, seq: int, *, start: int, max_chars: int, thread_id: int = 0
    ) -> RecalledMessage:
        """Characters [start, start + max_chars) of message ``seq``'s text, at most
        RECALL_MAX_BYTES of them; the file is read at that one line."""
        snapshot = await self.store.snapshot(task_uuid, "messages", thread_id)
        try:
            record = await asyncio.to_thread(
                read_record, snapshot.handle, "seq", seq, snapshot.head.messages_bytes
            )
        finally:
            snapshot.close()
        if record is None:
            raise MessageNotFound(task_uuid, thread_id, seq, snapshot.head.last_seq)
        part = excerpt(message_text(record), start, max_chars, RECALL_MAX_BYTES)
        return RecalledMessage(
            seq=seq,
            role=record.get("role"),
            timestamp=record["timestamp"],
            tokens=record.get("tokens", 0),
            tool_call_id=record.get("tool_call_id"),
            tool_name=record.get("tool_name"),
            text=part.text,
            start=part.start,
            end=part.end,
            total_chars=part.total_chars,
            more=part.end < part.total_chars,
        )

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
