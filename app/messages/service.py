"""Appending messages and reading a task's history."""

import asyncio

from app.config import Settings
from app.context.store import ContextStore
from app.errors import ErrorCode, TooLarge
from app.messages.schemas import AppendResult, MessageIn, MessagePage, MessageRecord
from app.observability.metrics import Metrics
from app.storage.jsonl import read_page


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
