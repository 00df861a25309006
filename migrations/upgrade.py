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
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import models  # noqa: F401  (registers the tables on Base.metadata)
from app.db.base import Base


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent))
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    """The migration scripts, read once per process (every start of an app asks)."""
    return ScriptDirectory.from_config(alembic_config())


def _upgrade(connection: Connection) -> None:
    context = MigrationContext.configure(connection)
    if not inspect(connection).get_table_names():
        # A new database gets the models' schema in one go, stamped with the newest revision
        # (Alembic's recipe): the schema every migration in turn builds (a test holds the
        # two to it), in a fraction of the time.
        Base.metadata.create_all(connection)
        context.stamp(_scripts(), "head")
    elif context.get_current_revision() != _scripts().get_current_head():
        config = alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


async def upgrade_to_head(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)
