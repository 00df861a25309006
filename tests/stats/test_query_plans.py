"""The /stats statements use the indexes (SQLite's EXPLAIN QUERY PLAN on a migrated database),
and compile for PostgreSQL with its own date arithmetic and without SQLite's planner hints."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql

from app.db.engine import Database, open_database
from app.stats.repository import build_queries
from app.stats.schemas import StatsFilters
from migrations.upgrade import upgrade_database
from tests.support.query_plans import plan, scans_table

DAY = datetime(2026, 11, 1, tzinfo=UTC)
SELECTIVE: list[dict[str, Any]] = [
    {"user": "alice"},
    {"owner": "notfolder"},
    {"repo": "coding_agent"},
    {"since": DAY},
    {"until": DAY},
    {"since": DAY, "until": datetime(2026, 11, 2, tzinfo=UTC)},
    {"user": "alice", "since": DAY},
]


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'plans.db'}")
    await upgrade_database(database)
    yield database
    await database.dispose()


@pytest.mark.parametrize("filters", SELECTIVE, ids=lambda f: "+".join(f))
async def test_filtered_queries_search_an_index(db: Database, filters: dict[str, Any]) -> None:
    queries = build_queries(StatsFilters(**filters))
    for name in ("by_status", "by_user", "running", "failures"):
        steps = await plan(db, getattr(queries, name))
        assert not scans_table(steps), (name, steps)
        assert any(s.startswith("SEARCH tasks USING") and "INDEX" in s for s in steps), (
            name,
            steps,
        )


async def test_unfiltered_plans(db: Database) -> None:
    queries = build_queries(StatsFilters())
    # Running tasks and failures come from the status indexes, whatever the filters.
    for name, index in (
        ("running", "ix_tasks_status_started_at"),
        ("failures", "ix_tasks_status_completed_at"),
    ):
        steps = await plan(db, getattr(queries, name))
        assert any(f"SEARCH tasks USING INDEX {index} (status=?)" in s for s in steps), steps
    # Per user: the (user, status) index holds everything the query reads.
    steps = await plan(db, queries.by_user)
    assert any("COVERING INDEX ix_tasks_user_status" in s for s in steps), steps
    # The whole table's aggregates: one pass over the rows, not a walk of an index fetching
    # each row (the `scanned` hint).
    assert scans_table(await plan(db, queries.by_status))


async def test_a_task_source_is_not_taken_as_selective(db: Database) -> None:
    """Most tasks may share a source: running tasks and failures still come by status."""
    queries = build_queries(StatsFilters(task_source="github"))
    for name, index in (
        ("running", "ix_tasks_status_started_at"),
        ("failures", "ix_tasks_status_completed_at"),
    ):
        steps = await plan(db, getattr(queries, name))
        assert any(f"SEARCH tasks USING INDEX {index} (status=?)" in s for s in steps), steps


def test_postgresql_compiles_its_own_arithmetic_without_hints() -> None:
    queries = build_queries(StatsFilters(since=DAY, until=DAY))
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    sql = str(queries.by_status.compile(dialect=dialect))
    assert "EXTRACT(EPOCH FROM (tasks.completed_at - tasks.started_at))" in sql
    assert "julianday" not in sql
    assert "likelihood" not in sql
    assert "GROUP BY tasks.status" in sql
