"""The composition root (app/lifespan.py) owns the summariser's processes: none before the first
condense, none left once the service has stopped, none at all with
COMPACTION__SUMMARIZER_PROCESSES=0; and it sets the interpreter's switch interval while the
service is up."""

import multiprocessing
import sys
from pathlib import Path

import httpx
import psutil

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
