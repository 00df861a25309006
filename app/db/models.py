"""Tables: tasks (the columns of both original designs' tasks tables, so their queries still
work), context heads, jobs, threads, idempotency keys."""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, PortableJSON, UTCDateTime


class Task(Base):
    __tablename__ = "tasks"

    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    task_source: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(255))
    repo: Mapped[str] = mapped_column(String(255))
    task_type: Mapped[str] = mapped_column(String(64))
    task_id: Mapped[str] = mapped_column(String(255))
    user: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))

    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    llm_provider: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(255))
    context_length: Mapped[int] = mapped_column(Integer)
    max_output_tokens: Mapped[int] = mapped_column(Integer)

    llm_call_count: Mapped[int] = mapped_column(Integer, default=0)
    tool_call_count: Mapped[int] = mapped_column(Integer, default=0)
    total_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    compression_count: Mapped[int] = mapped_column(Integer, default=0)
    total_messages: Mapped[int] = mapped_column(Integer, default=0)
    total_summaries: Mapped[int] = mapped_column(Integer, default=0)
    final_token_count: Mapped[int | None] = mapped_column(Integer)
    final_message_count: Mapped[int | None] = mapped_column(Integer)
    error_message: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", PortableJSON, default=dict)
    inherited_from: Mapped[str | None] = mapped_column(String(36))

    # Which counter counts this task's tokens (chosen once at creation: stored counts must agree).
    token_counter: Mapped[str] = mapped_column(
        String(32), default="heuristic", server_default="heuristic"
    )
    # Tokens of the tool definitions sent with every payload, counted once at creation: OpenAI's
    # rendering in tools_tokens, the other counted formats in format_tools_tokens.
    tools_tokens: Mapped[int] = mapped_column(Integer, default=0)
    format_tools_tokens: Mapped[dict[str, int]] = mapped_column(
        PortableJSON, default=dict, server_default="{}"
    )
    # Calibration (app/tokens/calibration.py): what the LLM reported over what we counted,
    # smoothed and bounded.
    token_calibration: Mapped[float] = mapped_column(Float, default=1.0, server_default="1.0")
    calibration_samples: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The counted tokens of the last payload served, waiting for a reported usage to compare.
    served_tokens: Mapped[int | None] = mapped_column(Integer)
    # Task options (POST /tasks): keep the latest planning entry in every payload; named webhooks.
    pin_plan: Mapped[bool] = mapped_column(default=False, server_default=false())
    hooks: Mapped[list[str]] = mapped_column(PortableJSON, default=list, server_default="[]")
    # Whether the payloads' tools include context_expand (its definition is in metadata.json's
    # tools, counted in tools_tokens like the agent's own).
    expand_tool: Mapped[bool] = mapped_column(default=False, server_default=false())
    # The task's own compaction options ({"tiers", "keep_tool_results"}); null: the server's.
    compaction: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    # The pinned plan message (the latest planning entry, as sent) and its cost, counted when it
    # is written: OpenAI's rendering, then the other counted formats'.
    pinned_plan: Mapped[str | None] = mapped_column(Text)
    plan_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    format_plan_tokens: Mapped[dict[str, int]] = mapped_column(
        PortableJSON, default=dict, server_default="{}"
    )
    # What this task inherited from an earlier run, with the notification comment.
    inheritance: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    # Hash of the creation body: a re-POST with the same uuid is idempotent only if it matches.
    create_fingerprint: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        Index(None, "status"),
        Index(None, "created_at"),
        Index(None, "completed_at"),
        Index(None, "user"),
        Index(None, "task_type"),
        Index(None, "owner", "repo"),
        Index(None, "task_source", "owner", "repo", "task_type", "task_id", "user"),
        # GET /stats (migration 0005): latest failures, running tasks, per-user counts, repo.
        Index(None, "status", "completed_at"),
        Index(None, "status", "started_at"),
        Index(None, "user", "status"),
        Index(None, "repo"),
    )


class ContextHead(Base):
    """The committed end of a context's files.

    Appends write and fsync the files first and then move this cursor in one transaction, so
    bytes past it are unacknowledged: readers stop at it, and the next writer repairs from it.
    """

    __tablename__ = "context_heads"

    task_uuid: Mapped[str] = mapped_column(
        ForeignKey("tasks.uuid", ondelete="CASCADE"), primary_key=True
    )
    thread_id: Mapped[int] = mapped_column(Integer, primary_key=True, default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    messages_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    current_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    current_messages: Mapped[int] = mapped_column(Integer, default=0)
    context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)  # as OpenAI renders it
    # The same total as the other counted formats render it: {"anthropic": n, "ollama": m}.
    format_tokens: Mapped[dict[str, int]] = mapped_column(
        PortableJSON, default=dict, server_default="{}"
    )
    # Assistant tool calls still waiting for their results: [[id, name], ...].
    open_tool_calls: Mapped[list[list[str]]] = mapped_column(PortableJSON, default=list)


class Job(Base):
    """Background work (condense, final summaries, webhook deliveries), claimed with a lease."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_uuid: Mapped[str] = mapped_column(ForeignKey("tasks.uuid", ondelete="CASCADE"))
    thread_id: Mapped[int] = mapped_column(Integer, default=0)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))  # queued|running|succeeded|failed|skipped
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    # What the handler needs besides the task (a webhook's name, event and task record...).
    params: Mapped[dict[str, Any] | None] = mapped_column(PortableJSON)
    not_before: Mapped[datetime] = mapped_column(UTCDateTime())
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index(None, "status", "not_before"),
        Index(None, "task_uuid", "kind", "status"),
    )


class Thread(Base):
    """A nested context of a task (the original thread design's table, scoped by task). The
    task's root context is thread 0 and has no row."""

    __tablename__ = "threads"

    task_uuid: Mapped[str] = mapped_column(
        ForeignKey("tasks.uuid", ondelete="CASCADE"), primary_key=True
    )
    thread_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent_thread_id: Mapped[int] = mapped_column(Integer)  # 0: the root context
    depth: Mapped[int] = mapped_column(Integer)  # the root is 0, its children 1, ...
    window_ratio: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # active | completed | aborted
    label: Mapped[str | None] = mapped_column(String(255))
    chronicle_summary: Mapped[str | None] = mapped_column(Text)
    chronicle_prompt: Mapped[str | None] = mapped_column(Text)
    message_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (Index(None, "task_uuid", "parent_thread_id"),)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    task_uuid: Mapped[str] = mapped_column(
        ForeignKey("tasks.uuid", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    response: Mapped[dict[str, Any]] = mapped_column(PortableJSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
