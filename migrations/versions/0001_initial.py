"""tasks, context heads, idempotency keys

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("task_source", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("repo", sa.String(255), nullable=False),
        sa.Column("task_type", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("user", sa.String(255), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("llm_provider", sa.String(64), nullable=True),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=False),
        sa.Column("max_output_tokens", sa.Integer(), nullable=False),
        sa.Column("llm_call_count", sa.Integer(), nullable=False),
        sa.Column("tool_call_count", sa.Integer(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.Column("compression_count", sa.Integer(), nullable=False),
        sa.Column("total_messages", sa.Integer(), nullable=False),
        sa.Column("total_summaries", sa.Integer(), nullable=False),
        sa.Column("final_token_count", sa.Integer(), nullable=True),
        sa.Column("final_message_count", sa.Integer(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("inherited_from", sa.String(36), nullable=True),
        sa.Column("tools_tokens", sa.Integer(), nullable=False),
        sa.Column("create_fingerprint", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("uuid", name=op.f("pk_tasks")),
    )
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.create_index(batch_op.f("ix_tasks_completed_at"), ["completed_at"])
        batch_op.create_index(batch_op.f("ix_tasks_created_at"), ["created_at"])
        batch_op.create_index(batch_op.f("ix_tasks_owner_repo"), ["owner", "repo"])
        batch_op.create_index(batch_op.f("ix_tasks_status"), ["status"])
        batch_op.create_index(
            batch_op.f("ix_tasks_task_source_owner_repo_task_type_task_id_user"),
            ["task_source", "owner", "repo", "task_type", "task_id", "user"],
        )
        batch_op.create_index(batch_op.f("ix_tasks_task_type"), ["task_type"])
        batch_op.create_index(batch_op.f("ix_tasks_user"), ["user"])

    op.create_table(
        "context_heads",
        sa.Column("task_uuid", sa.String(36), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("messages_bytes", sa.BigInteger(), nullable=False),
        sa.Column("current_bytes", sa.BigInteger(), nullable=False),
        sa.Column("current_messages", sa.Integer(), nullable=False),
        sa.Column("context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("open_tool_calls", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_uuid"],
            ["tasks.uuid"],
            name=op.f("fk_context_heads_task_uuid_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_uuid", "thread_id", name=op.f("pk_context_heads")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("task_uuid", sa.String(36), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_uuid"],
            ["tasks.uuid"],
            name=op.f("fk_idempotency_keys_task_uuid_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_uuid", "key", name=op.f("pk_idempotency_keys")),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("context_heads")
    op.drop_table("tasks")
