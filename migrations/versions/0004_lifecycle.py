"""task options (pinned plan, hooks), inheritance record, job parameters

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# Plain ADD COLUMN with constant defaults, as in 0003 (no batch copy on SQLite).
TASK_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("pin_plan", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("hooks", JSON, nullable=False, server_default="[]"),
    sa.Column("pinned_plan", sa.Text(), nullable=True),
    sa.Column("plan_tokens", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("format_plan_tokens", JSON, nullable=False, server_default="{}"),
    sa.Column("inheritance", JSON, nullable=True),
)


def upgrade() -> None:
    for column in TASK_COLUMNS:
        op.add_column("tasks", column)
    op.add_column("jobs", sa.Column("params", JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "params")
    for column in reversed(TASK_COLUMNS):
        op.drop_column("tasks", column.name)
