"""A fresh PostgreSQL database per test when TEST_DATABASE_URL names a server.

Each database is copied from a template migrated once per session, so a test starts from the
newest schema in ~15 ms. Administration runs on a private event loop in a worker thread: it
must not touch the loop pytest-asyncio gives the test.
"""

import os

import asyncpg
from sqlalchemy.engine import make_url

from app.db.engine import open_database
from migrations.upgrade import upgrade_database
from tests.support.database import in_thread


class PostgresDatabases:
    """Creates and drops the test databases on the server at ``server_url``."""

    def __init__(self, server_url: str) -> None:
        self.server_url = make_url(server_url)
        prefix = f"cs_test_{os.getpid()}"
        self.template = f"{prefix}_template"
        self._prefix = prefix
        self._count = 0

    def url_of(self, name: str) -> str:
        return self.server_url.set(database=name).render_as_string(hide_password=False)

    async def _execute(self, *statements: str) -> None:
        dsn = self.server_url.set(drivername="postgresql").render_as_string(hide_password=False)
        connection = await asyncpg.connect(dsn)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    def create_template(self) -> None:
        async def work() -> None:
            await self._execute(
                f"DROP DATABASE IF EXISTS {self.template}", f"CREATE DATABASE {self.template}"
            )
            database = open_database(self.url_of(self.template))
            try:
                await upgrade_database(database)
            finally:
                await database.dispose()

        in_thread(work)

    def create(self) -> str:
        self._count += 1
        name = f"{self._prefix}_{self._count}"
        sql = f"CREATE DATABASE {name} TEMPLATE {self.template} STRATEGY FILE_COPY"
        in_thread(lambda: self._execute(sql))
        return self.url_of(name)

    def drop(self, url: str) -> None:
        name = make_url(url).database
        in_thread(lambda: self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))

    def drop_template(self) -> None:
        in_thread(lambda: self._execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)"))
