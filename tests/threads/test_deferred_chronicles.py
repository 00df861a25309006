"""A chronicle's embedding put off (SPEC §8, seed 003): a thread's chronicle waits for the
chronicles of the threads under it, and tells of them; a paused task puts the embedding off
without spending the job's attempts."""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.tasks import append
from tests.support.threads import (
    CHRONICLE,
    FORMATS,
    assert_parent_shows,
    chronicle_jobs,
    chronicle_settings,
    embedded_text,
    embeddings,
    ended,
    payload_text,
    prompt_and_text,
    records,
    rows,
    scene,
    start,
)
from tests.support.waits import WAIT_S, jobs_of, until

fake_llm = llm_server.fake_llm


async def put_off(
    client: httpx.AsyncClient, uuid: str, thread_id: int, reason: str
) -> dict[str, Any]:
    """The thread's chronicle job once a run of it was put off for ``reason``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        jobs = await jobs_of(client, uuid, "chronicle")
        job = next(j for j in jobs if j["thread_id"] == thread_id)
        if reason in (job["error"] or ""):
            return job
        assert job["status"] in ("queued", "running"), job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.05)


GRAND_TURNS = [
    {"role": "user", "content": "GRAND: write test_empty_input in test_parser.py."},
    {"role": "assistant", "content": "GRAND: test_empty_input written; it passes."},
]


async def test_a_thread_ended_right_after_its_child_chronicles_after_it(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """Grandchild G under child C, both with messages; G ends, then C at once. C's job waits
    for G's; G's embedding goes into C (ended, but the service's record of its child goes
    in) once; C's chronicle is asked for after it and tells of it; the root gets C's once."""
    fake_llm.set("ok", text=CHRONICLE, delay=0.5)
    async with running_app(
        chronicle_settings(context_dir, fake_llm, job={"backoff_s": 0.05})
    ) as client:
        uuid, child = await scene(client, label="C")
        grand = (await start(client, uuid, parent_thread_id=child, label="G"))["thread_id"]
        await append(client, uuid, *GRAND_TURNS, thread_id=grand)
        await ended(client, uuid, grand, generate_chronicle=True)
        await ended(client, uuid, child, generate_chronicle=True)

        waiting = await put_off(client, uuid, child, "threads under it are still being chronicled")
        assert waiting["error"].startswith("JobDeferred: "), waiting
        jobs = await chronicle_jobs(client, uuid)
        assert {t: (j["status"], j["attempts"]) for t, j in jobs.items()} == {
            grand: ("succeeded", 1),
            child: ("succeeded", 1),  # waiting was no attempt
        }
        assert all(j["result"]["embedded"] is True for j in jobs.values())

        assert len(fake_llm.requests) == 2
        (_, grand_sent), (_, child_sent) = map(prompt_and_text, fake_llm.requests)
        assert "GRAND:" in grand_sent
        assert "THREAD:" not in grand_sent
        assert "THREAD:" in child_sent
        assert child_sent.count(embedded_text("completed", "G", CHRONICLE)) == 1

        inside = records(context_dir, uuid, child)
        (embedding,) = embeddings(inside, grand)
        assert embedding["seq"] == inside[-1]["seq"]
        assert embedding["content"] == embedded_text("completed", "G", CHRONICLE)
        root = records(context_dir, uuid)
        assert len(embeddings(root, child)) == 1
        assert embeddings(root, grand) == []
        found = await rows(client, uuid)
        assert [found[t]["chronicle_summary"] for t in (grand, child)] == [CHRONICLE] * 2
        await assert_parent_shows(
            client,
            uuid,
            parent=0,
            thread_id=child,
            status="completed",
            chronicle=CHRONICLE,
            label="C",
        )
        for fmt in FORMATS:  # C's own payload holds G's embedding once
            text = await payload_text(client, uuid, fmt, child)
            assert text.count("[Thread completed: G]") == 1, fmt


# -- 5. a paused task ------------------------------------------------------------------------


async def test_a_paused_task_puts_the_embedding_off_until_it_resumes(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """The task is stopped while the chronicle is being written: the job keeps the chronicle
    and waits, queued, without spending attempts (it has one); resumed, the embedding lands
    and no second call is made."""
    fake_llm.set("ok", text=CHRONICLE, delay=1.0)
    settings = chronicle_settings(context_dir, fake_llm, job={"max_attempts": 1, "backoff_s": 0.05})
    async with running_app(settings) as client:
        uuid, thread_id = await scene(client)
        await ended(client, uuid, thread_id)
        await until(lambda: bool(fake_llm.requests))
        stopped = await client.post(f"/tasks/{uuid}/stop")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["status"] == "paused"

        job = await put_off(client, uuid, thread_id, f"task {uuid} is paused")
        assert job["error"].startswith("JobDeferred: "), job
        await asyncio.sleep(0.5)  # about ten more runs put off
        jobs = await jobs_of(client, uuid, "chronicle")
        assert [(j["status"] in ("queued", "running"), j["attempts"] <= 1) for j in jobs] == [
            (True, True)
        ], jobs
        assert embeddings(records(context_dir, uuid), thread_id) == []
        assert (await rows(client, uuid))[thread_id]["chronicle_summary"] == CHRONICLE

        resumed = await client.post(f"/tasks/{uuid}/resume")
        assert resumed.status_code == 200, resumed.text
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert (job["status"], job["attempts"], job["error"]) == ("succeeded", 1, None), job
        assert job["result"] == {"thread_id": thread_id, "embedded": True}  # the kept chronicle
        assert len(fake_llm.requests) == 1
        found = records(context_dir, uuid)
        assert embeddings(found, thread_id) == [found[-1]]
        await assert_parent_shows(
            client, uuid, parent=0, thread_id=thread_id, status="completed", chronicle=CHRONICLE
        )
