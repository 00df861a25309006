"""A condense whose extractive digest (and, once the process is up, its indexing and
rendering) runs in a summariser process (COMPACTION__SUMMARIZER_PROCESSES), over the real app:
it commits what the worker thread's condense commits, and a process killed in the middle of it
(kill -9) fails the condense like any failure of its summariser: nothing is written, the
context still serves, appends go on, and a job retries."""

import asyncio
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.support.app import running_app
from tests.support.corpus import corpus_messages
from tests.support.files import read_jsonl, snapshot_dir, task_dir
from tests.support.settings import fast_settings
from tests.support.tasks import append, new_task, post_messages
from tests.support.waits import settled_jobs, until

Client = httpx.AsyncClient
TRAJECTORY = "claude-code__spotter_ae4a77f8.jsonl"  # 466 messages, half of them tool results
MESSAGES = 300
WINDOW = 10_000_000  # no compaction but the one asked for
BATCH = 50
PLAN = {
    "plan_type": "checklist",
    "items": [
        {"id": "1", "text": "reproduce the failure", "status": "done"},
        {"id": "2", "text": "fix the parser", "status": "active"},
    ],
}
# Fields of a summaries.jsonl record that say when, not what.
WHEN = ("created_at", "timestamp", "duration_ms")


def pooled(context_dir: Path, processes: int = 1) -> Settings:
    return fast_settings(context_dir, compaction={"summarizer_processes": processes})


async def filled(client: Client, **task: Any) -> str:
    """A task holding the start of a real trajectory and a plan."""
    uuid = await new_task(client, **task)
    response = await client.post(f"/tasks/{uuid}/planning", json=PLAN)
    assert response.status_code == 201, response.text
    messages = corpus_messages(TRAJECTORY)
    # Up to a turn's end (no tool call left without its result), so that appends may follow.
    end = max(n for n in range(1, MESSAGES) if messages[n]["role"] == "user")
    messages = messages[:end]
    for start in range(0, len(messages), BATCH):
        await append(client, uuid, *messages[start : start + BATCH])
    return uuid


async def kill_first_summariser_process() -> int:
    """SIGKILL the first summariser process to start (it starts when a digest is asked for, so
    it dies in the middle of that condense); its pid."""
    await until(lambda: bool(multiprocessing.active_children()))
    pid = multiprocessing.active_children()[0].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return pid


async def condensed(context_dir: Path, processes: int) -> tuple[list[dict[str, Any]], bytes]:
    """The summaries.jsonl records (less when they were written) and current.jsonl after a
    condense asked for, on a fresh service with ``processes`` summariser processes."""
    async with running_app(pooled(context_dir, processes)) as client:
        uuid = await filled(client, context_length=WINDOW)
        response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
        assert response.status_code == 200, response.text
        assert response.json()["kind"] == "condense", response.json()
        assert bool(multiprocessing.active_children()) == bool(processes)
        directory = task_dir(context_dir, uuid)
        records = [
            {k: v for k, v in r.items() if k not in WHEN}
            for r in read_jsonl(directory / "summaries.jsonl")
        ]
        return records, (directory / "current.jsonl").read_bytes()


async def test_a_condense_in_a_process_commits_what_one_in_a_thread_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The digest and the rendering of the new current.jsonl (the process is up by then): in
    the process, each gives what it gives in a thread."""
    in_thread = await condensed(tmp_path / "thread", processes=0)
    caplog.clear()
    pooled_ = await condensed(tmp_path / "process", processes=1)
    assert [r["kind"] for r in in_thread[0]] == ["condense"]
    assert pooled_ == in_thread
    assert "not in a process" not in caplog.text  # none of them fell back to a thread


async def test_a_summariser_process_killed_fails_the_condense_and_writes_nothing(
    context_dir: Path,
) -> None:
    async with running_app(pooled(context_dir)) as client:
        uuid = await filled(client, context_length=WINDOW)
        before = snapshot_dir(task_dir(context_dir, uuid))
        killer = asyncio.create_task(kill_first_summariser_process())
        response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
        killed = await killer
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == "compaction_failed"
        assert snapshot_dir(task_dir(context_dir, uuid)) == before  # nothing written

        # The context still serves and takes appends; the next condense gets a new process.
        assert (await client.get(f"/tasks/{uuid}/request")).status_code == 200
        await post_messages(client, uuid, {"role": "user", "content": "still here"})
        response = await client.post(f"/tasks/{uuid}/compress", json={"strategy": "condense"})
        assert response.status_code == 200, response.text
        assert response.json()["kind"] == "condense"
        assert killed not in [p.pid for p in multiprocessing.active_children()]
        assert (await client.get(f"/tasks/{uuid}/request")).status_code == 200


async def test_a_condense_job_whose_process_was_killed_is_retried(context_dir: Path) -> None:
    """The background condense of a context over its threshold: its first attempt loses its
    process, the retry condenses."""
    async with running_app(pooled(context_dir)) as client:
        killer = asyncio.create_task(kill_first_summariser_process())
        uuid = await filled(client, context_length=40_000, max_output_tokens=1000)
        await killer
        jobs = await settled_jobs(client, uuid, "condense")
        first = jobs[-1]  # newest first: later appends may have queued more
        assert (first["status"], first["attempts"]) == ("succeeded", 2), first
        kinds = [r["kind"] for r in read_jsonl(task_dir(context_dir, uuid) / "summaries.jsonl")]
        assert "condense" in kinds
        assert (await client.get(f"/tasks/{uuid}/request")).status_code == 200
        await post_messages(client, uuid, {"role": "user", "content": "still here"})
