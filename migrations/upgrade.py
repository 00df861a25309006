"""Bring the database schema to the newest Alembic revision: the service at startup, the CLI's
`migrate`, and the tests' databases."""

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from app.db import models  # noqa: F401  (registers the tables on Base.metadata)
from app.db.base import Base
from app.db.engine import Database, WriterBusy, in_session


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    """The migration scripts, read once per process (every start of an app asks)."""
    return ScriptDirectory.from_config(alembic_config())


def _at_head(connection: Connection) -> bool:
    """Whether the database has the schema of the newest revision. Blocking."""
    revision = MigrationContext.configure(connection).get_current_revision()
    return revision == _scripts().get_current_head()


def _upgrade(connection: Connection) -> None:
    """The schema at the newest revision, in the connection's transaction. Blocking."""
    if not inspect(connection).get_table_names():
        # A new database gets the models' schema in one go, stamped with the newest revision
        # (Alembic's recipe): the schema every migration in turn builds (a test holds the
        # two to it), in a fraction of the time.
        Base.metadata.create_all(connection)
        MigrationContext.configure(connection).stamp(_scripts(), "head")
    elif not _at_head(connection):
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


async def upgrade_database(db: Database) -> None:
    """The schema at the newest revision. A database already there is only read: a restart
    does not wait behind other processes' writes. Otherwise in one write transaction begun
    with the database's write lock (no other writer can slip in between its reads and
    writes); on SQLite in one call of the writer's thread where no other process is writing:
    through the async driver each of a new database's ~40 statements is several hand-offs to
    the driver's thread and back, which took half of an app's start."""
    async with db.engine.connect() as connection:
        if await connection.run_sync(_at_head):
            return
    if db.blocking_writer is not None:
        try:
            async with db.write_turn():
                await db.write_at_once(_upgrade)
            return
        except WriterBusy:  # another process is writing (or no write-ahead log): wait in turn
            pass
    async with db.transaction() as session:
        await in_session(session, _upgrade)
