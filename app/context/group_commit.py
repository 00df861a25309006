"""Group commit of appends: one write and one fsync per file for all appends that queued up.

While one group of a context is being written and committed, new appends to it wait in its
queue; the next group takes all of them. Each append still gets its own answer: its response,
a replay of an idempotency key, or the error that refused it alone.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.context.files import (
    ContextFiles,
    Recovery,
    Where,
    append_response,
    recover,
    require_metadata,
    write_group,
)
from app.context.pending import ContextKey
from app.context.records import (
    ContextAccumulator,
    HeadState,
    IdempotentResult,
    StatsDelta,
    request_hash,
    utc_timestamp,
)
from app.errors import AppError, ErrorCode, InvalidInput
from app.formats.costs import TokenCounting

AppendResult = tuple[dict[str, Any], bool]  # the append response, and whether it was a replay


@dataclass
class PendingAppend:
    messages: list[dict[str, Any]]
    idempotency_key: str | None
    future: "asyncio.Future[AppendResult]"
    result: "AppendResult | AppError | None" = None


# A group of appends whose messages serialise to at most this may do its file work on the
# event loop (app.storage.file_work): counting tokens costs ~35 us per KiB.
SMALL_GROUP_BYTES = 8 * 1024


def is_small(group: list[PendingAppend]) -> bool:
    """Whether the group's messages serialise to at most SMALL_GROUP_BYTES (one long message
    is serialised whole to find out: less than its validation cost)."""
    size = 0
    for pending in group:
        size += len(orjson.dumps(pending.messages))
        if size > SMALL_GROUP_BYTES:
            return False
    return True


@dataclass(frozen=True)
class FollowUp:
    """What a commit led to before its appends are answered: whether a condense is queued,
    and each message it brought that was cut over the message cap, with the tokens the cut
    took off the context (OpenAI's rendering, as an answer counts)."""

    scheduled: bool = False
    cuts: tuple[tuple[int, int], ...] = ()  # (seq cut, tokens taken off)

    def context_tokens(self, answered: int, seqs: list[int]) -> int:
        """An answer's context_tokens less what the cuts of its messages and of the group's
        earlier ones took off (a later append's cut is not in it)."""
        last = max(seqs, default=0)
        return answered - sum(taken for seq, taken in self.cuts if seq <= last)


def resolve(group: list[PendingAppend], follow_up: FollowUp) -> None:
    """Answer each append of a committed group (an AppError answers a refused one). A replay
    repeats its first answer as it was given."""
    for pending in group:
        result = pending.result
        assert result is not None
        if isinstance(result, AppError):
            pending.future.set_exception(result)
        else:
            response, replayed = result
            if not replayed:
                counted = follow_up.context_tokens(response["context_tokens"], response["seqs"])
                response = {
                    **response,
                    "context_tokens": counted,
                    "compaction_scheduled": follow_up.scheduled,
                }
            pending.future.set_result((response, replayed))


class AppendQueues:
    """The appends waiting for each context, and per context one drainer that hands them to
    ``commit`` a group at a time (which answers them; a failure of the whole group answers
    those it left unanswered)."""

    def __init__(self, commit: Callable[[ContextKey, list[PendingAppend]], Awaitable[None]]):
        self._commit = commit
        self._waiting: dict[ContextKey, list[PendingAppend]] = {}
        self._drainers: dict[ContextKey, asyncio.Task[None]] = {}

    def submit(
        self, context: ContextKey, messages: list[dict[str, Any]], idempotency_key: str | None
    ) -> "asyncio.Future[AppendResult]":
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(context, []).append(
            PendingAppend(messages, idempotency_key, future)
        )
        if context not in self._drainers:
            self._drainers[context] = asyncio.create_task(self._drain(context))
        return future

    async def _drain(self, context: ContextKey) -> None:
        try:
            while group := self._waiting.pop(context, None):
                try:
                    await self._commit(context, group)
                except BaseException as exc:
                    for pending in group:
                        if not pending.future.done():
                            pending.future.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            del self._drainers[context]


@dataclass
class GroupOutcome:
    recovery: Recovery
    head: HeadState
    stats: StatsDelta
    new_keys: list[IdempotentResult] = field(default_factory=list)
    results: list[AppendResult | AppError] = field(default_factory=list)


def write_appends(
    task_dir: Path,
    files: ContextFiles,
    where: Where,
    head: HeadState,
    group: list[PendingAppend],
    known_keys: Callable[[], dict[str, IdempotentResult]],
    *,
    counting: TokenCounting,
    token_counter: str,
    max_message_bytes: int,
    fsync: bool,
    only_if_agreed: bool = False,
) -> GroupOutcome | None:
    """Write a group to a context's ``files`` in the task's directory (repaired first if a
    crash left them past ``head``): its records, one result per append in ``results``.
    ``known_keys``: the idempotency keys registered for the context so far, read in this call
    (on SQLite it reads the database here, beside the file work). Blocking.

    ``only_if_agreed``: ``head`` is a copy this process kept, true only if the files are still
    its size (no other process wrote since, the directory not moved); None, nothing written,
    when they are not. (Past the head they would be a crash's tail to the repair.)"""
    if only_if_agreed and not files.in_agreement_with(head):
        return None
    registered = known_keys()  # before any repair: a failed read leaves the files alone
    require_metadata(task_dir)
    # Files in agreement with the head: nothing to recover (and no second look at their sizes).
    recovery = (
        Recovery(head=head) if only_if_agreed else recover(files, head, fsync=fsync, where=where)
    )
    known = registered | {r.key: r for r in recovery.idempotent_results}
    accumulator = ContextAccumulator(recovery.head)
    costs = counting.costs(token_counter)  # here: loading one blocks
    outcome = GroupOutcome(recovery=recovery, head=recovery.head, stats=StatsDelta())
    record_lines: list[bytes] = []
    current_lines: list[bytes] = []
    timestamp = utc_timestamp()
    for pending in group:
        key = pending.idempotency_key
        if key is not None and key in known:
            outcome.results.append(_replay(known[key], pending.messages))
            continue
        try:
            prepared = accumulator.prepare(
                pending.messages,
                costs=costs,
                timestamp=timestamp,
                max_message_bytes=max_message_bytes,
                idempotency_key=key,
            )
        except AppError as exc:
            outcome.results.append(exc)
            continue
        for record, line in prepared:
            record_lines.append(line)
            current_lines.append(accumulator.admit(record, line))
        response = append_response([r for r, _ in prepared], accumulator.head.context_tokens)
        outcome.results.append((response, False))
        if key is not None:
            known[key] = IdempotentResult(key, prepared[0][0]["request_hash"], response)
            outcome.new_keys.append(known[key])
    if record_lines:
        write_group(files, record_lines, current_lines, fsync=fsync)
    outcome.head = accumulator.head
    outcome.stats = accumulator.stats
    return outcome


def _replay(prior: IdempotentResult, messages: list[dict[str, Any]]) -> AppendResult | AppError:
    if request_hash(messages) != prior.request_hash:
        return InvalidInput(
            f"Idempotency-Key {prior.key!r} was already used for a different request",
            code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
            details={"key": prior.key},
        )
    return prior.response, True
