"""``context-service cleanup`` as a real process on a CONTEXT_DIR the app prepared, and that
process killed with SIGKILL half-way through a hundred deletions."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import running_app
from tests.support.cleanup import assert_gone, assert_present, backdate, cleanup_settings, make_task
from tests.support.files import snapshot_dir
from tests.support.paths import REPO
from tests.support.waits import settle

pytestmark = pytest.mark.e2e

CLI = Path(sys.executable).parent / "context-service"
CRASH_TASKS = 100  # a multiple of 25: created 25 at a time; each kill takes 20 or more
REMOVALS_BEFORE_KILL = 20
KILL_DELAYS_S = (0.0, 0.002, 0.007)  # after the last of those removals, one per kill
RUN_TIMEOUT_S = 120.0


def cli_env(context_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.upper() != "FSYNC"}
    return env | {"CONTEXT_DIR": str(context_dir)} | extra


def run_cli(context_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "cleanup", *args],
        cwd=REPO,
        env=cli_env(context_dir, **env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def report_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def cleanup_killed_midway(context_dir: Path, removals: int, delay_s: float) -> int:
    """Run ``context-service cleanup``; SIGKILL it ``delay_s`` after ``removals`` more task
    directories have left completed/. Returns how many directories .trash held then."""
    completed = context_dir / "completed"
    kill_at = len(os.listdir(completed)) - removals
    process = subprocess.Popen(
        [str(CLI), "cleanup"],
        cwd=REPO,
        env=cli_env(context_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, killed as a whole
    )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(os.listdir(completed)) > kill_at:
            assert process.poll() is None, "the cleanup ended before it could be killed"
            assert time.monotonic() < deadline, "the cleanup removed too little in time"
            time.sleep(0.001)
        time.sleep(delay_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, stderr
    return len(os.listdir(context_dir / ".trash"))


async def test_cli_cleanup(tmp_path: Path) -> None:
    """--dry-run lists and changes nothing; the default age is CLEANUP_DAYS; --older-than-days
    0 takes every finished task; the service then finds exactly those gone."""
    settings = cleanup_settings(tmp_path)
    async with running_app(settings) as client:
        old = [await make_task(client, "completed"), await make_task(client, "failed")]
        recent = await make_task(client, "completed")
        running = await make_task(client, "running")
        await settle(client)
        await backdate(settings, old[:1], days=40)
        await backdate(settings, old[1:], days=31)
        await backdate(settings, [running], days=60)
    context_dir = settings.context_dir
    before = snapshot_dir(context_dir)

    dry = report_of(run_cli(context_dir, "--dry-run"))
    assert (dry["dry_run"], dry["older_than_days"], dry["matched"]) == (True, 30, 2)
    assert (dry["removed"], dry["uuids"]) == (0, old)
    assert snapshot_dir(context_dir) == before

    report = report_of(run_cli(context_dir))
    assert (report["dry_run"], report["matched"], report["removed"]) == (False, 2, 2)
    assert report["uuids"] == old
    async with running_app(settings) as client:
        for task_uuid in old:
            await assert_gone(client, context_dir, task_uuid)
        await assert_present(client, context_dir, recent, "completed")
        await assert_present(client, context_dir, running, "running")

    everything = report_of(run_cli(context_dir, "--older-than-days", "0", CLEANUP_DAYS="0"))
    assert (everything["older_than_days"], everything["uuids"]) == (0, [recent])
    async with running_app(settings) as client:
        await assert_gone(client, context_dir, recent)
        await assert_present(client, context_dir, running, "running")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {"CLEANUP_DAYS": "0"}, "older_than_days is required"),
        (("--older-than-days", "-1"), {}, "--older-than-days"),
        (("--older-than-days", "soon"), {}, "--older-than-days"),
        (("--older-than-days", "36501"), {}, "--older-than-days"),
    ],
)
async def test_cli_refuses_bad_arguments(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    settings = cleanup_settings(tmp_path)
    async with running_app(settings) as client:
        finished = await make_task(client, "completed")
        await settle(client)
        await backdate(settings, [finished], days=400)
    result = run_cli(settings.context_dir, *args, **env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr
    async with running_app(settings) as client:
        await assert_present(client, settings.context_dir, finished, "completed")


async def test_kill_9_in_the_middle_of_a_cleanup(tmp_path: Path) -> None:
    """A cleanup of a hundred tasks SIGKILLed after some deletions, three times at moments
    that vary: after each restart every task is either whole (row, directory where its status
    says, readable) or wholly gone (404, no directory anywhere, .trash included), and never
    back once gone; then a cleanup without a kill removes the rest."""
    # Preparing is faster without fsync; the cleanup process runs with the default (always).
    settings = cleanup_settings(tmp_path, storage={"fsync": "never"}, job={"concurrency": 4})
    async with running_app(settings) as client:
        uuids: list[str] = []
        for first in range(0, CRASH_TASKS, 25):
            batch = (make_task(client, "completed", f"task {i}") for i in range(first, first + 25))
            uuids += await asyncio.gather(*batch)
        await settle(client, timeout_s=120)
        await backdate(settings, uuids, days=31)
    assert len(os.listdir(settings.context_dir / "completed")) == CRASH_TASKS

    present = list(uuids)
    for delay_s in KILL_DELAYS_S:
        in_trash = cleanup_killed_midway(settings.context_dir, REMOVALS_BEFORE_KILL, delay_s)
        async with running_app(settings) as client:
            before, present = present, []
            for task_uuid in uuids:
                if (await client.get(f"/tasks/{task_uuid}")).status_code == 404:
                    await assert_gone(client, settings.context_dir, task_uuid)
                else:
                    await assert_present(client, settings.context_dir, task_uuid, "completed")
                    present.append(task_uuid)
        assert set(present) < set(before)
        # A directory seen leaving completed/ may have gone to .trash with its row still
        # there: reconciliation brought it back.
        assert len(before) - len(present) >= REMOVALS_BEFORE_KILL - in_trash
        print(
            f"killed {delay_s}s after a removal: {len(before) - len(present)} removed, "
            f"{in_trash} directories in .trash at the kill"
        )

    async with running_app(settings) as client:
        response = await client.post("/maintenance/cleanup", json={"older_than_days": 30})
        assert response.status_code == 200, response.text
        report = response.json()
        assert (report["removed"], report["failed"]) == (len(present), 0)
        assert report["uuids"] == sorted(present)  # one completion instant: uuid order
        for task_uuid in uuids:
            await assert_gone(client, settings.context_dir, task_uuid)
