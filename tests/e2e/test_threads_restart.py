"""A chronicle cut short by kill -9 completes after the restart (issue 6, SPEC §8).

The summariser answers slowly, so the chronicle job is with it when the server is killed; the
restarted server (its summariser now fast) requeues the job once its lease has run out, writes
the chronicle and embeds it in the parent exactly once.
"""

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.fakes.llm_server import running_fake_llm
from tests.support.server import ServerPool, assert_seqs_contiguous
from tests.support.threads import (
    CHRONICLE,
    FORMATS,
    LABEL,
    assert_parent_shows,
    embeddings,
    ended,
    payload_text,
    records,
    rows,
    scene,
)

pytestmark = pytest.mark.e2e

LEASE_S = 3.0  # long enough that a busy machine still renews it in time
WAIT_S = 30.0


async def chronicle_job(http: httpx.AsyncClient, uuid: str, *, until: str) -> dict[str, Any]:
    """The task's one chronicle job, once its status is ``until``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        response = await http.get("/jobs", params={"task_uuid": uuid})
        assert response.status_code == 200, response.text
        jobs: list[dict[str, Any]] = [
            job for job in response.json()["jobs"] if job["kind"] == "chronicle"
        ]
        assert len(jobs) <= 1, jobs
        if jobs and jobs[0]["status"] == until:
            return jobs[0]
        assert time.monotonic() < deadline, jobs
        await asyncio.sleep(0.1)


async def test_a_chronicle_cut_short_by_kill_9_completes_after_a_restart(
    servers: ServerPool,
) -> None:
    with running_fake_llm() as fake:
        fake.set("ok", text=CHRONICLE, delay=30.0)
        env = {
            "LLM_BACKEND": "openai",
            "LLM_BASE_URL": fake.base_url,
            "LLM_MODEL": "fake-model",
            "LLM_TIMEOUT_S": "120",
            "LLM_MAX_RETRIES": "0",
            "JOB_LEASE_S": str(LEASE_S),
            "JOB_POLL_S": "0.1",
        }
        srv = servers.start(env=env)
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            uuid, thread_id = await scene(http)
            await ended(http, uuid, thread_id)
            running = await chronicle_job(http, uuid, until="running")
            deadline = time.monotonic() + WAIT_S
            while not fake.requests:  # the job is with the summariser
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert (await rows(http, uuid))[thread_id]["chronicle_summary"] is None
        srv.kill()
        assert embeddings(records(servers.context_dir, uuid), thread_id) == []
        fake.set("ok", delay=0.0)  # the restarted server's summariser answers at once
        await asyncio.sleep(LEASE_S * 1.2)  # the killed job's lease runs out

        restarted = servers.start(env=env)
        async with httpx.AsyncClient(base_url=restarted.base_url, timeout=30) as http:
            job = await chronicle_job(http, uuid, until="succeeded")
            assert job["id"] == running["id"]
            assert job["attempts"] == 2
            assert job["result"]["embedded"] is True
            first, second = fake.requests  # the same call, asked again
            assert second.body == first.body
            row = (await rows(http, uuid))[thread_id]
            assert (row["status"], row["chronicle_summary"]) == ("completed", CHRONICLE)
            await assert_parent_shows(
                http, uuid, parent=0, thread_id=thread_id, status="completed", chronicle=CHRONICLE
            )
            found = records(servers.context_dir, uuid)
            assert_seqs_contiguous(found)
            assert embeddings(found, thread_id) == [found[-1]]

        # A second restart changes nothing: one embedding, whatever runs again.
        restarted.restart()
        async with httpx.AsyncClient(base_url=restarted.base_url, timeout=30) as http:
            for fmt in FORMATS:
                text = await payload_text(http, uuid, fmt)
                assert text.count(f"[Thread completed: {LABEL}]") == 1, fmt
            assert records(servers.context_dir, uuid) == found
