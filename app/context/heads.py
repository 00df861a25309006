"""The database side of contexts: heads, the task (and thread) rows' counters, idempotency keys.

Every statement the store runs on these tables is here; the callers hold the task lock and
choose the transaction. The files are the record of truth (:mod:`app.context.files`): a head row
says how much of them is committed and counted.
"""

import dataclasses
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Insert, Update, and_, bindparam, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.context.files import Recovery
from app.context.pending import ContextKey, PendingHead
from app.context.records import HeadState, IdempotentResult, StatsDelta
from app.db.engine import in_session
from app.db.models import ContextHead, IdempotencyKey, Task, Thread

log = logging.getLogger(__name__)
T = TypeVar("T")
# Every append moves its head and touches its task (and thread) row, every payload served
# records its tokens: Core UPDATEs on the tables, as the ORM's DML path costs about a third of
# the commit's CPU again (bench/README.md).
HEADS = ContextHead.metadata.tables["context_heads"]
TASKS = Task.metadata.tables["tasks"]
THREADS = Thread.metadata.tables["threads"]
KEYS = IdempotencyKey.metadata.tables["idempotency_keys"]


# (attribute, column) of the task row: the attribute of column "metadata" is metadata_.
_TASK_ATTRIBUTES = [
    (attribute.key, attribute.columns[0].name) for attribute in sa_inspect(Task).mapper.column_attrs
]
_HEAD_FIELDS = (
    "last_seq",
    "messages_bytes",
    "current_bytes",
    "current_messages",
    "context_tokens",
    "open_tool_calls",
    "format_tokens",
)
_CONTEXT = (
    select(
        TASKS,
        *(HEADS.c[name].label(f"head_{name}") for name in _HEAD_FIELDS),
        select(THREADS.c.thread_id)
        .where(THREADS.c.task_uuid == TASKS.c.uuid)
        .exists()
        .label("has_threads"),
    )
    .outerjoin(
        HEADS,
        and_(HEADS.c.task_uuid == TASKS.c.uuid, HEADS.c.thread_id == bindparam("thread")),
    )
    .where(TASKS.c.uuid == bindparam("task"))
)

_KNOWN_KEYS = select(KEYS.c.key, KEYS.c.request_hash, KEYS.c.response).where(
    KEYS.c.task_uuid == bindparam("task"), KEYS.c.key.in_(bindparam("keys", expanding=True))
)

# The write-behind's statements, built once: a round runs each as one executemany.
_HEAD_BASES = (
    select(
        HEADS.c.task_uuid,
        HEADS.c.thread_id,
        HEADS.c.last_seq,
        HEADS.c.messages_bytes,
        HEADS.c.current_bytes,
    )
    .where(HEADS.c.task_uuid.in_(bindparam("tasks", expanding=True)))
    .with_for_update()
)
_HEAD_MOVE = update(HEADS).where(
    HEADS.c.task_uuid == bindparam("b_task"), HEADS.c.thread_id == bindparam("b_thread")
)
_TASK_COUNTS = (
    update(TASKS)
    .where(TASKS.c.uuid == bindparam("b_task"))
    .values(
        total_messages=TASKS.c.total_messages + bindparam("b_messages"),
        llm_call_count=TASKS.c.llm_call_count + bindparam("b_llm_calls"),
        tool_call_count=TASKS.c.tool_call_count + bindparam("b_tool_calls"),
        total_tokens=TASKS.c.total_tokens + bindparam("b_usage_tokens"),
        updated_at=bindparam("b_updated_at"),
    )
)
_SERVED = (
    update(TASKS)
    .where(TASKS.c.uuid == bindparam("b_task"))
    .values(served_tokens=bindparam("b_tokens"))
)
_THREAD_COUNT = (
    update(THREADS)
    .where(THREADS.c.task_uuid == bindparam("b_task"), THREADS.c.thread_id == bindparam("b_thread"))
    .values(message_count=THREADS.c.message_count + bindparam("b_messages"))
)


def _key_insert(insert: postgresql.Insert | sqlite.Insert) -> Insert:
    """Keys inserted; a key already there keeps its row: its first answer, the one a replay
    repeats."""
    return insert.on_conflict_do_nothing(index_elements=[KEYS.c.task_uuid, KEYS.c.key])


# By dialect: SQL has no portable way to skip a row already there.
_KEY_INSERTS = {
    "postgresql": _key_insert(postgresql.insert(KEYS)),
    "sqlite": _key_insert(sqlite.insert(KEYS)),
}


def head_state(row: ContextHead) -> HeadState:
    return HeadState(
        last_seq=row.last_seq,
        messages_bytes=row.messages_bytes,
        current_bytes=row.current_bytes,
        current_messages=row.current_messages,
        context_tokens=row.context_tokens,
        open_tool_calls=list(row.open_tool_calls),
        format_tokens=dict(row.format_tokens or {}),
    )


async def load_context(
    session: AsyncSession, task_uuid: str, thread_id: int
) -> tuple[Task, HeadState | None, bool] | None:
    """A task's row, the head of one of its contexts (None if it has none) and whether the
    task has threads, in one query: most have none to read. None if there is no such task.

    A Core query and a row object built from it (not attached to any session): every access
    but an append reads these, and the ORM's loading costs about as much again as the query.
    """
    connection = await session.connection()
    row = (await connection.execute(_CONTEXT, {"task": task_uuid, "thread": thread_id})).first()
    return _context_of(row)


def load_context_blocking(
    connection: Connection, task_uuid: str, thread_id: int
) -> tuple[Task, HeadState | None, bool] | None:
    """:func:`load_context` through a blocking connection (on the event loop while that is
    quick, else in a worker thread)."""
    return _context_of(
        connection.execute(_CONTEXT, {"task": task_uuid, "thread": thread_id}).first()
    )


def _context_of(row: Row[Any] | None) -> tuple[Task, HeadState | None, bool] | None:
    if row is None:
        return None
    values = row._mapping
    task = Task(**{attribute: values[column] for attribute, column in _TASK_ATTRIBUTES})
    head = None
    if values["head_last_seq"] is not None:
        head = HeadState(
            last_seq=values["head_last_seq"],
            messages_bytes=values["head_messages_bytes"],
            current_bytes=values["head_current_bytes"],
            current_messages=values["head_current_messages"],
            context_tokens=values["head_context_tokens"],
            open_tool_calls=list(values["head_open_tool_calls"]),
            format_tokens=dict(values["head_format_tokens"] or {}),
        )
    return task, head, bool(values["has_threads"])


async def load_heads(session: AsyncSession, task_uuid: str) -> list[ContextHead]:
    """The head rows of all a task's contexts."""
    return list(
        await session.scalars(select(ContextHead).where(ContextHead.task_uuid == task_uuid))
    )


async def load_running_heads(session: AsyncSession) -> list[tuple[str, int, int]]:
    """(task uuid, thread id, committed bytes of messages.jsonl) of every running context."""
    rows = await session.execute(
        select(HEADS.c.task_uuid, HEADS.c.thread_id, HEADS.c.messages_bytes)
        .join(TASKS, TASKS.c.uuid == HEADS.c.task_uuid)
        .where(TASKS.c.status == "running")
    )
    return [(task_uuid, thread_id, committed) for task_uuid, thread_id, committed in rows]


async def load_threads(session: AsyncSession, task_uuid: str) -> dict[int, Thread]:
    rows = await session.scalars(select(Thread).where(Thread.task_uuid == task_uuid))
    return {t.thread_id: t for t in rows}


async def load_idempotency_keys(
    session: AsyncSession, task_uuid: str, keys: list[str]
) -> dict[str, IdempotentResult]:
    """Which of ``keys`` the task has registered, with what they answered."""
    if not keys:
        return {}
    connection = await session.connection()
    return _known(await connection.execute(_KNOWN_KEYS, {"task": task_uuid, "keys": keys}))


def load_idempotency_keys_blocking(
    connection: Connection, task_uuid: str, keys: list[str]
) -> dict[str, IdempotentResult]:
    """:func:`load_idempotency_keys` through a blocking connection (in a worker thread)."""
    if not keys:
        return {}
    return _known(connection.execute(_KNOWN_KEYS, {"task": task_uuid, "keys": keys}))


def _known(rows: Iterable[Row[Any]]) -> dict[str, IdempotentResult]:
    return {row.key: IdempotentResult(row.key, row.request_hash, row.response) for row in rows}


def add_context(session: AsyncSession, thread: Thread) -> None:
    """A new thread's row and its empty head."""
    session.add(thread)
    session.add(ContextHead(task_uuid=thread.task_uuid, thread_id=thread.thread_id))


async def commit_head(
    session: AsyncSession,
    key: ContextKey,
    head: HeadState,
    task_values: dict[str, Any],
    keys: list[IdempotentResult],
    thread_values: dict[str, Any] | None,
    now: datetime,
) -> None:
    """Move a context's head, update its task (and thread) row and register keys."""
    task_uuid, thread_id = key
    connection = await session.connection()
    await connection.execute(_head_update(task_uuid, thread_id, head))
    await connection.execute(
        update(TASKS).where(TASKS.c.uuid == task_uuid).values(updated_at=now, **task_values)
    )
    if thread_values:
        await connection.execute(
            update(THREADS)
            .where(THREADS.c.task_uuid == task_uuid, THREADS.c.thread_id == thread_id)
            .values(**thread_values)
        )
    if keys:
        registered = [(task_uuid, key, now) for key in keys]
        await in_session(session, lambda connection: _register_keys(connection, registered))


def write_pending(
    connection: Connection, entries: list[tuple[ContextKey, PendingHead]]
) -> list[tuple[ContextKey, PendingHead]]:
    """Move contexts' heads from their bases to their pending heads, with the counters and
    keys of the records between (their task locks held, so no head moves meanwhile). Where
    another process moved a database head since, it adopted the records of the first steps
    from the files and counted them itself: only the steps after the head it wrote are
    written (none if it is no step's, :meth:`PendingHead.over`). The heads are read in one
    query, and moved with one executemany per table. Returns what was written of each entry.
    Blocking: in a worker thread, or through :func:`in_session`."""
    if not entries:
        return []
    tasks = {task_uuid for (task_uuid, _), _ in entries}
    rows = connection.execute(_HEAD_BASES, {"tasks": sorted(tasks)})
    found = {(row[0], row[1]): (row[2], row[3], row[4]) for row in rows}
    written = []
    for key, entry in entries:
        at = found.get(key)
        left = None if at is None else entry.over(at)
        if left is not None:
            written.append((key, left))
        else:
            log.info("task %s thread %d: pending head dropped, the head moved", *key)
    if not written:
        return []
    connection.execute(
        _HEAD_MOVE,
        [{"b_task": key[0], "b_thread": key[1], **vars(entry.head)} for key, entry in written],
    )
    connection.execute(
        _TASK_COUNTS,
        [
            {
                "b_task": key[0],
                "b_messages": entry.stats.messages,
                "b_llm_calls": entry.stats.llm_calls,
                "b_tool_calls": entry.stats.tool_calls,
                "b_usage_tokens": entry.stats.usage_tokens,
                "b_updated_at": entry.updated_at,
            }
            for key, entry in written
        ],
    )
    threads = [(key, entry) for key, entry in written if key[1]]
    if threads:
        connection.execute(
            _THREAD_COUNT,
            [
                {"b_task": key[0], "b_thread": key[1], "b_messages": entry.stats.messages}
                for key, entry in threads
            ],
        )
    _register_keys(
        connection,
        [
            (task_uuid, key, entry.updated_at or datetime.now(UTC))
            for (task_uuid, _), entry in written
            for key in entry.keys.values()
        ],
    )
    return written


def write_served(connection: Connection, served: dict[str, int]) -> None:
    """The counted tokens of the payload served last, for the next reported usage, of each
    task: one executemany. Blocking, as :func:`write_pending`."""
    if served:
        connection.execute(
            _SERVED,
            [{"b_task": task_uuid, "b_tokens": tokens} for task_uuid, tokens in served.items()],
        )


def stats_values(recovery: Recovery, stats: StatsDelta, thread_id: int) -> dict[str, Any]:
    """The task's statistics after a commit; they count the messages of all its contexts."""
    if recovery.stats_are_totals and thread_id:
        # A thread's history was re-read from scratch: its totals are not the task's, and what
        # it lost is unknown. The task's figures stay as they were.
        log.warning("thread %d: statistics not updated after rebuilding it", thread_id)
        return {}
    if recovery.stats_are_totals:
        totals = recovery.stats.add(stats)
        return {
            "total_messages": totals.messages,
            "llm_call_count": totals.llm_calls,
            "tool_call_count": totals.tool_calls,
            "total_tokens": totals.usage_tokens,
        }
    delta = recovery.stats.add(stats)
    return {
        "total_messages": Task.total_messages + delta.messages,
        "llm_call_count": Task.llm_call_count + delta.llm_calls,
        "tool_call_count": Task.tool_call_count + delta.tool_calls,
        "total_tokens": Task.total_tokens + delta.usage_tokens,
    }


def thread_message_count(recovery: Recovery, stats: StatsDelta) -> dict[str, Any]:
    """A thread row's message count after a commit to the thread."""
    delta = recovery.stats.add(stats).messages
    return {"message_count": delta if recovery.stats_are_totals else Thread.message_count + delta}


def compaction_counters(compactions: int) -> dict[str, Any]:
    """The task's counters after a head rebuilt by ``compactions`` compactions (or a rewind)."""
    return {
        "compression_count": Task.compression_count + compactions,
        "total_summaries": Task.total_summaries + compactions,
    }


def calibration_values(factor: float | None) -> dict[str, Any]:
    """The task's values after a reported usage: the payload it answers is used up (one
    report per payload served); ``factor``, when the report was evidence, is the new one."""
    values: dict[str, Any] = {"served_tokens": None}
    if factor is None:
        return values
    return values | {
        "token_calibration": factor,
        "calibration_samples": Task.calibration_samples + 1,
    }


def _head_update(task_uuid: str, thread_id: int, head: HeadState) -> Update:
    return (
        update(HEADS)
        .where(HEADS.c.task_uuid == task_uuid, HEADS.c.thread_id == thread_id)
        .values(**dataclasses.asdict(head))
    )


def _register_keys(
    connection: Connection, keys: list[tuple[str, IdempotentResult, datetime]]
) -> None:
    """Register (task, key, when) in one executemany. Blocking, as :func:`write_pending`."""
    if not keys:
        return
    connection.execute(
        _KEY_INSERTS[connection.dialect.name],
        [
            {
                "task_uuid": task_uuid,
                "key": result.key,
                "request_hash": result.request_hash,
                "response": result.response,
                "created_at": created_at,
            }
            for task_uuid, result, created_at in keys
        ],
    )
