"""The composition root (app/lifespan.py) owns the summariser's processes: none before the first
condense, none left once the service has stopped, none at all with
COMPACTION__SUMMARIZER_PROCESSES=0; and it sets the interpreter's switch interval while the
service is up, keeps what its startup made out of the garbage collector's full passes
while it serves, and says at startup when SQLite could not keep a write-ahead log."""

import asyncio
import gc
import logging
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from app.config import CompactionSettings, Settings
from tests.support.app import running_app
from tests.support.conversations import turns
from tests.support.tasks import append, new_task

MESSAGES = 20


async def condense(client: httpx.AsyncClient) -> None:
    uuid = await new_task(client)
    await append(client, uuid, *turns(MESSAGES))
    response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
    assert response.status_code == 200, response.text
    assert response.json()["kind"] == "condense", response.json()


async def test_the_summariser_processes_start_at_a_condense_and_stop_with_the_service(
    context_dir: Path,
) -> None:
    """With the default size, one process (the tests' own apps run none unless told: see
    tests/support/settings.py), started by the first condense."""
    assert CompactionSettings.model_fields["summarizer_processes"].default == 1
    settings = Settings(context_dir=context_dir, compaction={"summarizer_processes": 1})
    async with running_app(settings) as client:
        assert not multiprocessing.active_children()
        await condense(client)
        pids = [child.pid for child in multiprocessing.active_children()]
        assert len(pids) == 1
    assert not multiprocessing.active_children()
    assert not [pid for pid in pids if pid is not None and psutil.pid_exists(pid)]


async def test_no_summariser_process_when_the_setting_is_zero(context_dir: Path) -> None:
    settings = Settings(context_dir=context_dir, compaction={"summarizer_processes": 0})
    async with running_app(settings) as client:
        await condense(client)
        assert not multiprocessing.active_children()


async def test_the_switch_interval_is_the_settings_while_the_service_is_up(
    context_dir: Path,
) -> None:
    before = sys.getswitchinterval()
    settings = Settings(context_dir=context_dir, server={"switch_interval_ms": 0.25})
    async with running_app(settings) as client:
        assert sys.getswitchinterval() == 0.00025
        assert (await client.get("/healthz")).status_code == 200
    assert sys.getswitchinterval() == before


def _freeze_counts(context_dir: str, gc_freeze: bool) -> tuple[int, int, int]:
    """In a fresh process (nothing frozen there): the collector's frozen objects before the
    service starts, while it serves, and after it stopped."""

    async def run() -> tuple[int, int, int]:
        before = gc.get_freeze_count()
        settings = Settings(context_dir=Path(context_dir), server={"gc_freeze": gc_freeze})
        async with running_app(settings) as client:
            serving = gc.get_freeze_count()
            uuid = await new_task(client)
            await append(client, uuid, {"role": "user", "content": "made after startup"})
            # What requests make is not frozen (frozen objects freed since leave the count).
            assert gc.get_freeze_count() <= serving
        return before, serving, gc.get_freeze_count()

    return asyncio.run(run())


def _in_a_fresh_process(context_dir: Path, gc_freeze: bool) -> tuple[int, int, int]:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_freeze_counts, str(context_dir), gc_freeze).result(timeout=120)


def test_what_startup_made_is_kept_out_of_the_collector_while_the_service_is_up(
    context_dir: Path,
) -> None:
    """Frozen (the collector's full passes skip it) while serving; given back at shutdown, so
    that a process which goes on collects it."""
    before, serving, after = _in_a_fresh_process(context_dir, gc_freeze=True)
    assert before == 0
    assert serving > 10_000  # the app's modules, models and routes at the least
    assert after == 0


def test_nothing_is_frozen_when_the_setting_is_off(context_dir: Path) -> None:
    assert _in_a_fresh_process(context_dir, gc_freeze=False) == (0, 0, 0)


async def test_a_process_that_froze_its_own_objects_keeps_them_as_it_froze_them(
    context_dir: Path,
) -> None:
    """The test run itself freezes what it collected (conftest): the service leaves that be,
    neither freezing this test's objects with it nor unfreezing the run's at shutdown."""
    frozen = gc.get_freeze_count()
    assert frozen > 0
    async with running_app(Settings(context_dir=context_dir)) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen


@pytest.mark.sqlite_only
async def test_a_database_without_a_write_ahead_log_is_said_at_startup_and_still_serves(
    context_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite's unix-none VFS stands for a file system that cannot hold a write-ahead log."""

    def warned() -> bool:
        return any("write-ahead log" in record.getMessage() for record in caplog.records)

    caplog.set_level(logging.WARNING, logger="app.lifespan")
    async with running_app(Settings(context_dir=context_dir / "wal")):
        pass
    assert not warned()

    plain = context_dir / "plain"
    url = f"sqlite+aiosqlite:///file:{plain / 'tasks.db'}?vfs=unix-none&uri=true"
    async with running_app(Settings(context_dir=plain, database_url=url)) as client:
        uuid = await new_task(client)
        before = (await client.get(f"/tasks/{uuid}")).json()["statistics"]["total_messages"]
        await append(client, uuid, *turns(2))
        after = (await client.get(f"/tasks/{uuid}")).json()["statistics"]["total_messages"]
    assert warned()
    assert after == before + 2
