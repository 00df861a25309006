"""The Alembic migrations build exactly the schema the models describe, up and down."""

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app.db.base import Base
from app.db.engine import Database, open_database
from migrations.upgrade import alembic_config, upgrade_database
from tests.support.database import in_thread, sqlite_write_lock_held, statements_of


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


# What the async driver may run when a migration reads only (BEGIN: SQLite's deferred kind).
READS = {"BEGIN", "PRAGMA", "SELECT"}


def _schema(connection: Connection) -> dict[str, Any]:
    """Every table's columns, keys and indexes as the database describes them (column order
    aside: a migration that adds a column puts it last), and the revision it is stamped with."""
    inspector = inspect(connection)
    tables = {
        table: [
            sorted(repr(column) for column in inspector.get_columns(table)),
            inspector.get_pk_constraint(table)["constrained_columns"],
            sorted(repr(key) for key in inspector.get_foreign_keys(table)),
            sorted(repr(index) for index in inspector.get_indexes(table)),
            sorted(repr(unique) for unique in inspector.get_unique_constraints(table)),
        ]
        for table in inspector.get_table_names()
    }
    return {
        "tables": tables,
        "revision": MigrationContext.configure(connection).get_current_revision(),
    }


async def test_a_new_database_gets_the_schema_every_migration_builds(tmp_path: Path) -> None:
    """The service builds a new database from the models and stamps it with the newest
    revision: the same tables, columns, keys, indexes and revision as running each
    migration in turn."""
    migrated = f"sqlite:///{tmp_path / 'migrated.db'}"
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", migrated.replace("sqlite://", "sqlite+aiosqlite://"))
    await asyncio.to_thread(command.upgrade, config, "head")  # env.py runs its own loop
    built = f"sqlite:///{tmp_path / 'built.db'}"
    database = open_database(built.replace("sqlite://", "sqlite+aiosqlite://"))
    try:
        await upgrade_database(database)
    finally:
        await database.dispose()
    schemas = []
    for url in (migrated, built):
        sync_engine = create_engine(url)
        with sync_engine.connect() as connection:
            schemas.append(_schema(connection))
        sync_engine.dispose()
    assert schemas[0]["revision"] is not None
    assert schemas[1] == schemas[0]


@pytest.mark.parametrize("writer", ["at once", "behind another write"])
async def test_upgrading_a_populated_database_keeps_its_rows(tmp_path: Path, writer: str) -> None:
    """Migrations run as the service runs them (its engines, foreign keys on) on a database
    with tasks, through the quick writer or, while another process writes, the usual one: no
    row is lost, not even through a cascade."""
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
        if writer == "at once":
            await upgrade_database(database)
        else:
            _write_ahead_log(tmp_path / "p.db")
            await _upgrade_behind_another_write(database, url)
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


def test_migrations_on_postgresql(database_url: str) -> None:
    """On the test's PostgreSQL database (at head from the template): down to nothing, up
    again, and the schema is exactly the models'."""
    if not database_url:
        pytest.skip("the suite runs on SQLite (make test-postgres runs this)")
    config = alembic_config()
    config.set_main_option("sqlalchemy.url", database_url)

    def compare(connection: Connection) -> tuple[list[Any], set[str]]:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        return diff, set(inspect(connection).get_table_names())

    async def schema() -> tuple[list[Any], set[str]]:
        engine = create_async_engine(database_url, poolclass=NullPool)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(compare)
        finally:
            await engine.dispose()

    command.downgrade(config, "base")  # env.py runs its own event loop: no loop may run here
    assert in_thread(schema)[1] == {"alembic_version"}
    command.upgrade(config, "head")
    diff, tables = in_thread(schema)
    assert diff == [], f"models and migrations disagree: {diff}"
    assert {"tasks", "context_heads", "idempotency_keys", "jobs", "threads"} <= tables


async def test_the_service_builds_a_new_sqlite_database_in_one_call_of_its_writer(
    tmp_path: Path,
) -> None:
    """A new SQLite database is built through the blocking writer, in one transaction begun
    with the write lock; the async driver only reads."""
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'n.db'}")
    try:
        assert database.blocking_writer is not None
        quick, usual = statements_of(database.blocking_writer, database.engine.sync_engine)
        await upgrade_database(database)
    finally:
        await database.dispose()
    assert quick.count("BEGIN") == 1
    assert "CREATE" in quick
    assert set(usual) <= READS
    _assert_at_head(tmp_path / "n.db")


async def test_a_database_at_head_is_only_read_even_while_another_process_writes(
    tmp_path: Path,
) -> None:
    """A restart on a database already at the newest revision writes nothing, and so does not
    wait for another process's write to end."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'h.db'}"
    database = open_database(url)
    try:
        await upgrade_database(database)
    finally:
        await database.dispose()
    database = open_database(url)
    try:
        assert database.blocking_writer is not None
        quick, usual = statements_of(database.blocking_writer, database.engine.sync_engine)
        async with sqlite_write_lock_held(url):
            await asyncio.wait_for(upgrade_database(database), 5)
    finally:
        await database.dispose()
    assert quick == []
    assert set(usual) <= READS


async def test_a_migration_waits_its_turn_behind_another_processs_write(tmp_path: Path) -> None:
    """While another process holds SQLite's write lock, the quick writer's refusal is not the
    answer: the migration waits its turn and completes once the lock is let go."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    _write_ahead_log(tmp_path / "w.db")
    database = open_database(url)
    try:
        assert database.blocking_writer is not None
        quick, usual = statements_of(database.blocking_writer, database.engine.sync_engine)
        await _upgrade_behind_another_write(database, url)
    finally:
        await database.dispose()
    assert quick == ["BEGIN"]  # refused: the lock is held
    assert "CREATE" in usual
    _assert_at_head(tmp_path / "w.db")


def _write_ahead_log(path: Path) -> None:
    """The database in WAL mode, as another service process leaves it (a writer elsewhere
    then holds WAL's write lock, which a new connection waits for)."""
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")


async def _upgrade_behind_another_write(database: Database, url: str) -> None:
    """``upgrade_database`` begun while another connection holds SQLite's write lock: it is
    still waiting half a second later, and done once the lock is let go."""
    async with sqlite_write_lock_held(url):
        migrating = asyncio.create_task(upgrade_database(database))
        await asyncio.sleep(0.5)
        assert not migrating.done()
    await asyncio.wait_for(migrating, 30)


def _assert_at_head(path: Path) -> None:
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            schema = _schema(connection)
    finally:
        engine.dispose()
    assert {"tasks", "context_heads", "idempotency_keys", "jobs", "threads"} <= set(
        schema["tables"]
    )
    assert schema["revision"] == ScriptDirectory.from_config(alembic_config()).get_current_head()
