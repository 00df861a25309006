"""per-task token counter, per-format token totals, calibration

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# Plain ALTER TABLE ADD/DROP COLUMN with constant defaults. No batch mode: on SQLite that copies
# the table and drops the old one, and with foreign keys on (as the service connects) the drop
# would cascade to every task's head, jobs and idempotency keys.
TASK_COLUMNS = (
    sa.Column("token_counter", sa.String(32), nullable=False, server_default="heuristic"),
    sa.Column("format_tools_tokens", JSON, nullable=False, server_default="{}"),
    sa.Column("token_calibration", sa.Float(), nullable=False, server_default="1.0"),
    sa.Column("calibration_samples", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("served_tokens", sa.Integer(), nullable=True),
)


def upgrade() -> None:
    # Tasks from before this revision were counted by the heuristic and have no per-format
    # totals ({}): their counts in the anthropic and ollama formats fall back to OpenAI's.
    for column in TASK_COLUMNS:
        op.add_column("tasks", column)
    op.add_column(
        "context_heads", sa.Column("format_tokens", JSON, nullable=False, server_default="{}")
    )


def downgrade() -> None:
    op.drop_column("context_heads", "format_tokens")
    for column in reversed(TASK_COLUMNS):
        op.drop_column("tasks", column.name)
