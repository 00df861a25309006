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


def upgrade() -> None:
    # Tasks created before this revision were counted by the heuristic; their per-format totals
    # are unknown ({}), which reads as "the same as OpenAI's" until a compaction rebuilds them.
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("token_counter", sa.String(32), nullable=False, server_default="heuristic")
        )
        batch.add_column(
            sa.Column("format_tools_tokens", JSON, nullable=False, server_default=sa.text("'{}'"))
        )
        batch.add_column(
            sa.Column("token_calibration", sa.Float(), nullable=False, server_default="1.0")
        )
        batch.add_column(
            sa.Column("calibration_samples", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("served_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("served_format", sa.String(16), nullable=True))
    with op.batch_alter_table("context_heads") as batch:
        batch.add_column(
            sa.Column("format_tokens", JSON, nullable=False, server_default=sa.text("'{}'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("context_heads") as batch:
        batch.drop_column("format_tokens")
    with op.batch_alter_table("tasks") as batch:
        for column in (
            "served_format",
            "served_tokens",
            "calibration_samples",
            "token_calibration",
            "format_tools_tokens",
            "token_counter",
        ):
            batch.drop_column(column)
