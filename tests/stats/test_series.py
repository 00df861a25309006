"""The statistics over time behind the ops page's charts: tasks, tokens, compactions and
failures per hour or day of created_at, empty slots as zeros, on the real database."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.dialects import postgresql

from app.config import Settings
from app.db.engine import Database, open_database
from app.db.models import Task
from app.stats.repository import series_query
from app.stats.schemas import StatsFilters
from app.stats.service import MAX_SLOTS, StatsService
from migrations.upgrade import upgrade_database
from tests.support.query_plans import plan, scans_table
from tests.support.tasks import create_task

NOON = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


async def no_pending() -> None:
    """Nothing to flush: the rows were written by the app, which has flushed its own."""


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = open_database(settings.effective_database_url)
    yield database
    await database.dispose()


async def created_at(db: Database, moments: dict[str, datetime], tokens: int = 0) -> None:
    async with db.transaction() as session:
        for uuid, moment in moments.items():
            await session.execute(
                update(Task)
                .where(Task.uuid == uuid)
                .values(created_at=moment, total_tokens=tokens, compression_count=2)
            )


async def test_days_and_hours_are_counted_and_gaps_are_zeros(
    client: httpx.AsyncClient, db: Database
) -> None:
    moments = {
        (await create_task(client))["uuid"]: moment
        for moment in (
            NOON,
            NOON + timedelta(minutes=30),
            NOON + timedelta(hours=1),
            NOON + timedelta(days=2, hours=11, minutes=59),  # 23:59 two days later
            NOON - timedelta(days=40),  # before the range
        )
    }
    await created_at(db, moments, tokens=100)
    failed = next(iter(moments))
    assert (
        await client.post(f"/tasks/{failed}/fail", json={"error_message": "x"})
    ).status_code == 200
    stats = StatsService(db, no_pending)

    days = await stats.series(
        NOON - timedelta(days=1), NOON + timedelta(days=3), "day", StatsFilters()
    )
    assert [p.start for p in days] == [datetime(2026, 11, 19 + i, tzinfo=UTC) for i in range(5)]
    assert [p.tasks for p in days] == [0, 3, 0, 1, 0]
    assert [p.tokens for p in days] == [0, 300, 0, 100, 0]
    assert [p.compactions for p in days] == [0, 6, 0, 2, 0]
    assert [p.failures for p in days] == [0, 1, 0, 0, 0]

    hours = await stats.series(NOON, NOON + timedelta(hours=2), "hour", StatsFilters())
    assert [(p.start.hour, p.tasks) for p in hours] == [(12, 2), (13, 1), (14, 0)]

    alone = await stats.series(NOON, NOON, "day", StatsFilters(user="nobody"))
    assert [(p.start, p.tasks) for p in alone] == [(datetime(2026, 11, 20, tzinfo=UTC), 0)]


async def test_a_long_range_keeps_its_newest_slots(client: httpx.AsyncClient, db: Database) -> None:
    stats = StatsService(db, no_pending)
    hours = await stats.series(NOON - timedelta(days=365), NOON, "hour", StatsFilters())
    assert len(hours) == MAX_SLOTS
    assert hours[-1].start == NOON


@pytest.mark.sqlite_only
async def test_a_bounded_series_reads_the_created_at_index(tmp_path: Path) -> None:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'plans.db'}")
    try:
        await upgrade_database(database)
        filters = StatsFilters(since=NOON, until=NOON + timedelta(days=1))
        for bucket in ("hour", "day"):
            steps = await plan(database, series_query(filters, bucket))
            assert not scans_table(steps), steps
            assert any("created_at" in step for step in steps), steps
    finally:
        await database.dispose()


def test_postgresql_names_its_slots_in_utc() -> None:
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    day = str(series_query(StatsFilters(), "day").compile(dialect=dialect))
    hour = str(series_query(StatsFilters(), "hour").compile(dialect=dialect))
    assert "to_char(tasks.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')" in day
    assert """to_char(tasks.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24')""" in hour
    assert "strftime" not in day + hour
