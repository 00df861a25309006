"""threads: nested contexts of a task (the original design's "Stelis" threads)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("task_uuid", sa.String(36), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("parent_thread_id", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("window_ratio", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("label", sa.String(255), nullable=True),
        sa.Column("chronicle_summary", sa.Text(), nullable=True),
        sa.Column("chronicle_prompt", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_uuid"],
            ["tasks.uuid"],
            name=op.f("fk_threads_task_uuid_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_uuid", "thread_id", name=op.f("pk_threads")),
    )
    op.create_index(
        op.f("ix_threads_task_uuid_parent_thread_id"), "threads", ["task_uuid", "parent_thread_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_threads_task_uuid_parent_thread_id"), table_name="threads")
    op.drop_table("threads")
