"""The Alembic migrations build exactly the schema the models describe, up and down."""

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.db.base import Base
from app.db.migrate import alembic_config


def test_upgrade_matches_models_and_downgrade_empties(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", url.replace("sqlite://", "sqlite+aiosqlite://"))
    command.upgrade(config, "head")
    engine = create_engine(url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == [], f"models and migrations disagree: {diff}"
        assert {"tasks", "context_heads", "idempotency_keys"} <= set(
            inspect(connection).get_table_names()
        )
    command.downgrade(config, "base")
    with engine.connect() as connection:
        assert set(inspect(connection).get_table_names()) == {"alembic_version"}
    engine.dispose()
