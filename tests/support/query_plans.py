"""SQLite's EXPLAIN QUERY PLAN of a statement, on a migrated database: which indexes a query
uses."""

from typing import Any

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

from app.db.engine import Database


class Explain(Executable, ClauseElement):
    inherit_cache = False

    def __init__(self, statement: Select[*tuple[Any, ...]]) -> None:
        self.statement = statement


@compiles(Explain, "sqlite")
def _explain(element: Explain, compiler: SQLCompiler, **kw: Any) -> str:
    return f"EXPLAIN QUERY PLAN {compiler.process(element.statement, **kw)}"


async def plan(db: Database, statement: Select[*tuple[Any, ...]]) -> list[str]:
    async with db.reader() as session:
        return [row[3] for row in await session.execute(Explain(statement))]


def scans_table(steps: list[str]) -> bool:
    """A bare full scan of the rows (SCAN tasks, not SCAN tasks USING ... INDEX)."""
    return any(step == "SCAN tasks" for step in steps)
