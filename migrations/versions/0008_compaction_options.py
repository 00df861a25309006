"""tasks.compaction: a task's own compaction tiers and the tool results masking keeps

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Null: the server's settings (COMPACTION_TIERS, KEEP_TOOL_RESULTS).
    op.add_column("tasks", sa.Column("compaction", JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("tasks", "compaction")
