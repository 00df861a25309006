"""indexes for GET /stats

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# name -> columns; the names follow the models' naming convention (ix_%(table)s_%(columns)s).
INDEXES = {
    "ix_tasks_status_completed_at": ["status", "completed_at"],
    "ix_tasks_status_started_at": ["status", "started_at"],
    "ix_tasks_user_status": ["user", "status"],
    "ix_tasks_repo": ["repo"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "tasks", columns)


def downgrade() -> None:
    for name in reversed(INDEXES):
        op.drop_index(name, table_name="tasks")
