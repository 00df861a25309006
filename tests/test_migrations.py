"""The Alembic migrations build exactly the schema the models describe, up and down."""

import asyncio
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from app.db.base import Base
from app.db.engine import open_database
from app.db.migrate import alembic_config, upgrade_to_head


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


async def test_upgrading_a_populated_database_keeps_its_rows(tmp_path: Path) -> None:
    """Migrations run as the service runs them (its engine, foreign keys on) on a database
    with tasks: no row is lost, not even through a cascade."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'p.db'}"
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", url)
    await asyncio.to_thread(command.upgrade, config, "0002")  # env.py runs its own loop
    engine = create_engine(url.replace("+aiosqlite", ""))
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, "
            "created_at, updated_at, model, context_length, max_output_tokens, llm_call_count, "
            "tool_call_count, total_tokens, compression_count, total_messages, total_summaries, "
            "metadata, tools_tokens, create_fingerprint) VALUES ('t1', 's', 'o', 'r', 'i', '1', "
            "'running', '2026-01-01', '2026-01-01', 'gpt-4o', 8000, 1000, 0, 0, 0, 0, 1, 0, "
            "'{}', 0, 'f')"
        )
        connection.exec_driver_sql(
            "INSERT INTO context_heads (task_uuid, thread_id, last_seq, messages_bytes, "
            "current_bytes, current_messages, context_tokens, open_tool_calls) "
            "VALUES ('t1', 0, 1, 10, 10, 1, 5, '[]')"
        )
    database = open_database(url)
    try:
        await upgrade_to_head(database.engine)
    finally:
        await database.dispose()
    with engine.connect() as connection:
        task = connection.exec_driver_sql(
            "SELECT token_counter, format_tools_tokens, token_calibration FROM tasks"
        ).one()
        head = connection.exec_driver_sql("SELECT last_seq, format_tokens FROM context_heads")
        assert tuple(task) == ("heuristic", "{}", 1.0)
        assert [tuple(row) for row in head] == [(1, "{}")]
    engine.dispose()
