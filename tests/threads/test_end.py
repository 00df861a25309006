"""Ending and aborting threads: chronicles, their embedding in the parent, cascades and
refusals (SPEC §8, seed 003's STELIS_END and "Chronicle統合").

The chronicle job runs against the real fake LLM server; every check goes through the API or
the files the service wrote.
"""

import asyncio
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db.engine import open_database
from app.db.models import Job
from app.threads.chronicle import DEFAULT_PROMPT, PARTIAL
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.files import snapshot_dir
from tests.support.payloads import served
from tests.support.server import assert_seqs_contiguous
from tests.support.tasks import append, create_task
from tests.support.threads import (
    CHRONICLE,
    FORMATS,
    LABEL,
    ROOT_TURN,
    THREAD_TURNS,
    WHEN,
    assert_parent_shows,
    chronicle_jobs,
    chronicle_settings,
    embedded_text,
    embeddings,
    ended,
    finish,
    payload_text,
    prompt_and_text,
    records,
    rows,
    scene,
    send,
    start,
)
from tests.support.waits import WAIT_S, jobs_of, until

fake_llm = llm_server.fake_llm

TOOL_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "parser.py"}'},
        }
    ],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "def parse(tokens): ..."}


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture
async def llm_client(context_dir: Path, fake_llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    fake_llm.set("ok", text=CHRONICLE)
    async with running_app(chronicle_settings(context_dir, fake_llm)) as client:
        yield client


# -- end, with and without a chronicle -------------------------------------------------------


async def test_a_chronicle_is_written_with_the_thread_s_prompt_and_lands_in_the_parent(
    llm_client: httpx.AsyncClient, context_dir: Path, fake_llm: FakeLLM
) -> None:
    prompt = "Say in one paragraph what the parser session changed."
    uuid, thread_id = await scene(llm_client, chronicle_prompt=prompt)
    answer = await ended(llm_client, uuid, thread_id, generate_chronicle=True)
    assert answer["status"] == "completed"
    assert answer["completed_at"] is not None

    job = (await chronicle_jobs(llm_client, uuid))[thread_id]
    assert job["status"] == "succeeded", job
    assert job["result"] == {
        "thread_id": thread_id,
        "summarizer": "openai:fake-model",
        "embedded": True,
    }
    assert len(fake_llm.requests) == 1
    sent_prompt, sent = prompt_and_text(fake_llm.last)
    assert sent_prompt == prompt
    for turn in THREAD_TURNS:
        assert turn["content"] in sent
    assert "ROOT:" not in sent  # the thread's own history, not the root's
    assert "You are a coding agent." not in sent

    row = (await rows(llm_client, uuid))[thread_id]
    assert row["chronicle_summary"] == CHRONICLE
    assert row["status"] == "completed"
    assert row["completed_at"] is not None
    await assert_parent_shows(
        llm_client, uuid, parent=0, thread_id=thread_id, status="completed", chronicle=CHRONICLE
    )
    openai = (await served(llm_client, uuid, fmt="openai")).json()["messages"]
    assert openai[-1] == {
        "role": "system",
        "content": embedded_text("completed", LABEL, CHRONICLE),
    }
    assert openai[-2]["content"].startswith(f"[Thread: {LABEL}]")  # the anchor, before it

    found = records(context_dir, uuid)
    assert_seqs_contiguous(found)
    assert len(embeddings(found, thread_id)) == 1
    assert embeddings(found, thread_id)[0]["metadata"] == {
        "stelis_thread_id": thread_id,
        "stelis_status": "completed",
    }


async def test_without_a_chronicle_prompt_the_default_one_is_used(
    llm_client: httpx.AsyncClient, fake_llm: FakeLLM
) -> None:
    uuid, thread_id = await scene(llm_client)
    await ended(llm_client, uuid, thread_id)  # generate_chronicle defaults to true
    assert (await chronicle_jobs(llm_client, uuid))[thread_id]["status"] == "succeeded"
    assert [prompt_and_text(r)[0] for r in fake_llm.requests] == [DEFAULT_PROMPT]


async def test_a_chronicle_job_run_again_neither_asks_again_nor_embeds_twice(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """A job that ran to its end runs once more (as after a crash before its status was
    saved): the stored chronicle and the embedding's key make it a no-op."""
    fake_llm.set("ok", text=CHRONICLE)
    settings = chronicle_settings(context_dir, fake_llm)
    async with running_app(settings) as client:
        uuid, thread_id = await scene(client)
        await ended(client, uuid, thread_id)
        job = (await chronicle_jobs(client, uuid))[thread_id]
        before = records(context_dir, uuid)
        # Back to the queue through the app's own database layer: the API cannot rerun a job.
        db = open_database(settings.effective_database_url)
        try:
            async with db.transaction() as session:
                await session.execute(
                    update(Job)
                    .where(Job.id == job["id"])
                    .values(status="queued", attempts=0, not_before=datetime.now(UTC))
                )
        finally:
            await db.dispose()
        again = (await chronicle_jobs(client, uuid))[thread_id]
        assert again["status"] == "succeeded"
        assert again["attempts"] == 1
        assert again["result"]["embedded"] is True  # the key's replay
        assert "summarizer" not in again["result"]  # the stored chronicle: no second call
        assert len(fake_llm.requests) == 1
        assert records(context_dir, uuid) == before
        assert len(embeddings(before, thread_id)) == 1
        await assert_parent_shows(
            client, uuid, parent=0, thread_id=thread_id, status="completed", chronicle=CHRONICLE
        )


async def test_ending_without_a_chronicle_queues_nothing_and_embeds_nothing(
    llm_client: httpx.AsyncClient, context_dir: Path, fake_llm: FakeLLM
) -> None:
    uuid, thread_id = await scene(llm_client)
    before = records(context_dir, uuid)
    answer = await ended(llm_client, uuid, thread_id, generate_chronicle=False)
    assert answer["status"] == "completed"
    assert answer["completed_at"] is not None
    assert await jobs_of(llm_client, uuid, "chronicle") == []
    assert records(context_dir, uuid) == before
    row = (await rows(llm_client, uuid))[thread_id]
    assert (row["status"], row["chronicle_summary"]) == ("completed", None)
    for fmt in FORMATS:
        text = await payload_text(llm_client, uuid, fmt)
        assert "[Thread completed:" not in text
        assert re.search(rf"\[Thread: {LABEL}\]\n- ID: {thread_id}\n.*\n- Ended: {WHEN}\n", text)
        assert "## Chronicle" not in text
    assert fake_llm.requests == []


async def test_a_nested_thread_s_chronicle_lands_in_its_parent_thread(
    llm_client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid, outer = await scene(llm_client, label="outer")
    inner = (await start(llm_client, uuid, parent_thread_id=outer, label="inner"))["thread_id"]
    await append(llm_client, uuid, *THREAD_TURNS, thread_id=inner)
    await ended(llm_client, uuid, inner)
    assert (await chronicle_jobs(llm_client, uuid))[inner]["result"]["embedded"] is True
    await assert_parent_shows(
        llm_client,
        uuid,
        parent=outer,
        thread_id=inner,
        status="completed",
        chronicle=CHRONICLE,
        label="inner",
    )
    assert len(embeddings(records(context_dir, uuid, outer), inner)) == 1
    assert embeddings(records(context_dir, uuid), inner) == []
    for fmt in FORMATS:
        assert "[Thread completed: inner]" not in await payload_text(llm_client, uuid, fmt)
    # The outer thread goes on after it.
    await append(llm_client, uuid, {"role": "user", "content": "next step"}, thread_id=outer)
    assert_seqs_contiguous(records(context_dir, uuid, outer))


# -- abort -----------------------------------------------------------------------------------


async def test_an_abort_writes_a_partial_chronicle(
    llm_client: httpx.AsyncClient, context_dir: Path, fake_llm: FakeLLM
) -> None:
    prompt = "Chronicle the parser session."
    uuid, thread_id = await scene(llm_client, chronicle_prompt=prompt)
    answer = await ended(llm_client, uuid, thread_id, "abort")
    assert answer["status"] == "aborted"
    assert answer["completed_at"] is not None
    job = (await chronicle_jobs(llm_client, uuid))[thread_id]
    assert job["result"]["embedded"] is True
    assert [prompt_and_text(r)[0] for r in fake_llm.requests] == [prompt + PARTIAL]
    row = (await rows(llm_client, uuid))[thread_id]
    assert (row["status"], row["chronicle_summary"]) == ("aborted", CHRONICLE)
    await assert_parent_shows(
        llm_client, uuid, parent=0, thread_id=thread_id, status="aborted", chronicle=CHRONICLE
    )
    (embedding,) = embeddings(records(context_dir, uuid), thread_id)
    assert embedding["metadata"]["stelis_status"] == "aborted"


@pytest.mark.parametrize("action", ["abort", "end"])
async def test_a_thread_without_messages_gets_no_chronicle_job(
    llm_client: httpx.AsyncClient, context_dir: Path, action: str
) -> None:
    uuid = (await create_task(llm_client))["uuid"]
    await append(llm_client, uuid, ROOT_TURN)
    thread_id = (await start(llm_client, uuid, label=LABEL))["thread_id"]
    before = records(context_dir, uuid)
    answer = await ended(llm_client, uuid, thread_id, action)
    assert answer["status"] == ("aborted" if action == "abort" else "completed")
    assert await jobs_of(llm_client, uuid, "chronicle") == []
    assert records(context_dir, uuid) == before


async def test_an_abort_while_the_chronicle_keeps_failing_leaves_the_parent_consistent(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """Every call fails: the job retries, then the extractive digest stands in on its last
    attempt. Meanwhile and after, the root serves payloads and takes messages, seqs go on,
    and exactly one embedding lands; a restart finds nothing to repair."""
    fake_llm.set("error")
    settings = chronicle_settings(context_dir, fake_llm, job={"max_attempts": 3, "backoff_s": 1.0})
    async with running_app(settings) as client:
        uuid, thread_id = await scene(client)
        await ended(client, uuid, thread_id, "abort")
        await until(lambda: bool(fake_llm.requests))
        last = records(context_dir, uuid)[-1]["seq"]
        for number, fmt in enumerate(FORMATS):
            await served(client, uuid, fmt=fmt)
            turn = {"role": "user" if number % 2 else "assistant", "content": f"meanwhile {number}"}
            assert await append(client, uuid, turn) == [last + number + 1]
        # Still retrying: all of that happened during the failure.
        assert [j["status"] for j in await jobs_of(client, uuid, "chronicle")] != ["succeeded"]

        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["status"] == "succeeded", job
        assert job["attempts"] == 3
        assert job["result"]["summarizer"].startswith("extractive (after ")
        assert job["result"]["embedded"] is True
        assert len(fake_llm.requests) == 3  # one call an attempt
        assert {prompt_and_text(r)[0] for r in fake_llm.requests} == {DEFAULT_PROMPT + PARTIAL}
        chronicle = (await rows(client, uuid))[thread_id]["chronicle_summary"]
        assert THREAD_TURNS[0]["content"] in chronicle  # the digest keeps the thread's request

        found = records(context_dir, uuid)
        assert_seqs_contiguous(found)
        (embedding,) = embeddings(found, thread_id)
        assert embedding["seq"] == found[-1]["seq"] == last + len(FORMATS) + 1
        assert embedding["content"] == embedded_text("aborted", LABEL, chronicle.strip())
        for fmt in FORMATS:
            text = await payload_text(client, uuid, fmt)
            assert text.count(f"[Thread aborted: {LABEL}]") == 1, fmt
            assert "meanwhile 3" in text
        assert await append(client, uuid, {"role": "user", "content": "after"}) == [
            found[-1]["seq"] + 1
        ]
        view = (await client.get(f"/tasks/{uuid}")).json()
        before = snapshot_dir(context_dir)
    async with running_app(settings) as client:
        for fmt in FORMATS:
            await served(client, uuid, fmt=fmt)
        assert (await client.get(f"/tasks/{uuid}")).json()["statistics"] == view["statistics"]
        assert snapshot_dir(context_dir) == before


# -- the parent waits for tool results -------------------------------------------------------


async def deferred_job(client: httpx.AsyncClient, uuid: str, thread_id: int) -> dict[str, Any]:
    """The thread's chronicle job once it has put its embedding off at least once."""
    deadline = time.monotonic() + WAIT_S
    while True:
        jobs = await jobs_of(client, uuid, "chronicle")
        job = next(j for j in jobs if j["thread_id"] == thread_id)
        if "EmbeddingDeferred" in (job["error"] or ""):
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.05)


async def test_the_embedding_waits_for_the_parent_s_tool_results(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.set("ok", text=CHRONICLE)
    settings = chronicle_settings(context_dir, fake_llm, job={"max_attempts": 10, "backoff_s": 0.1})
    async with running_app(settings) as client:
        uuid, thread_id = await scene(client)
        await append(client, uuid, TOOL_CALL)
        await ended(client, uuid, thread_id)
        job = await deferred_job(client, uuid, thread_id)
        assert job["status"] in ("queued", "running"), job
        found = records(context_dir, uuid)
        assert embeddings(found, thread_id) == []
        assert found[-1]["tool_calls"] == TOOL_CALL["tool_calls"]
        assert (await rows(client, uuid))[thread_id]["chronicle_summary"] == CHRONICLE
        for fmt in FORMATS:
            await served(client, uuid, fmt=fmt)  # still a valid payload meanwhile

        await append(client, uuid, TOOL_RESULT)
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["status"] == "succeeded", job
        assert job["result"]["embedded"] is True
        assert len(fake_llm.requests) == 1  # the chronicle was written once, then kept
        found = records(context_dir, uuid)
        assert_seqs_contiguous(found)
        assert [r.get("role") for r in found[-3:]] == ["assistant", "tool", "system"]
        assert found[-3]["tool_calls"] == TOOL_CALL["tool_calls"]
        assert embeddings(found, thread_id) == [found[-1]]
        await assert_parent_shows(
            client, uuid, parent=0, thread_id=thread_id, status="completed", chronicle=CHRONICLE
        )


async def test_results_that_come_after_the_job_s_attempts_still_get_the_embedding(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """A tool may run longer than the job's retries last: the chronicle, written and stored,
    must still reach the parent once the results are in."""
    fake_llm.set("ok", text=CHRONICLE)
    settings = chronicle_settings(context_dir, fake_llm, job={"max_attempts": 2, "backoff_s": 0.05})
    async with running_app(settings) as client:
        uuid, thread_id = await scene(client)
        await append(client, uuid, TOOL_CALL)
        await ended(client, uuid, thread_id)
        await deferred_job(client, uuid, thread_id)
        await asyncio.sleep(1.0)  # longer than every retry the job has (0.05 s, then none)
        await append(client, uuid, TOOL_RESULT)
        await until(lambda: len(embeddings(records(context_dir, uuid), thread_id)) == 1)
        found = records(context_dir, uuid)
        assert [r.get("role") for r in found[-3:]] == ["assistant", "tool", "system"]


# -- cascades and refusals -------------------------------------------------------------------


async def test_active_children_refuse_an_end_and_refusals_write_nothing(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid, outer = await scene(client, label="outer")
    inner = (await start(client, uuid, parent_thread_id=outer, label="inner"))["thread_id"]
    before, tree = snapshot_dir(context_dir), await rows(client, uuid)
    for action in ("end", "abort"):
        for body in ({}, {"cascade": False, "generate_chronicle": False}):
            response = await finish(client, uuid, outer, action, **body)
            details = assert_error(response, 409, "thread_has_active_children")
            assert details == {"thread_id": outer, "active": [inner]}
    assert_error(await finish(client, uuid, 99), 404, "thread_not_found")
    assert_error(await finish(client, uuid, 99, "abort"), 404, "thread_not_found")
    missing = "6f1c1d0e-0000-4000-8000-000000000000"
    assert_error(await finish(client, missing, outer), 404, "task_not_found")
    assert_error(await finish(client, uuid, outer, cascade="maybe"), 422, "validation_error")
    assert_error(await finish(client, uuid, outer, label="x"), 422, "validation_error")
    # The root context ends with its task.
    assert_error(await finish(client, uuid, 0), 422, "validation_error")
    assert snapshot_dir(context_dir) == before
    assert await rows(client, uuid) == tree
    assert await jobs_of(client, uuid, "chronicle") == []

    await ended(client, uuid, inner, generate_chronicle=False)
    before, tree = snapshot_dir(context_dir), await rows(client, uuid)
    for action in ("end", "abort"):
        details = assert_error(await finish(client, uuid, inner, action), 409, "thread_not_active")
        assert details == {"uuid": uuid, "thread_id": inner, "status": "completed"}
    response = await send(client, uuid, {"role": "user", "content": "x"}, inner)
    assert_error(response, 409, "thread_not_active")
    assert snapshot_dir(context_dir) == before
    assert await rows(client, uuid) == tree
    await ended(client, uuid, outer, generate_chronicle=False)  # no active child any more


async def test_a_cascade_aborts_the_active_descendants_with_partial_chronicles(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """outer > inner > innermost (no messages), and a sibling ended before. Ending the outer
    thread with cascade aborts the two active ones; inner gets a partial chronicle, stored on
    its row and embedded in outer (ended, but the service's record of a child still goes in);
    outer's chronicle waits for it, tells of it, and lands in the root."""
    fake_llm.set("ok", text=CHRONICLE)
    settings = chronicle_settings(context_dir, fake_llm, threads={"max_depth": 4})
    async with running_app(settings) as client:
        uuid, outer = await scene(client, label="outer", max_depth=4)
        inner = (await start(client, uuid, parent_thread_id=outer, label="inner", max_depth=4))[
            "thread_id"
        ]
        inner_turn = {"role": "user", "content": "INNER: write the regression test."}
        await append(client, uuid, inner_turn, thread_id=inner)
        innermost = (await start(client, uuid, parent_thread_id=inner, max_depth=4))["thread_id"]
        sibling = (await start(client, uuid, parent_thread_id=outer, label="sibling"))["thread_id"]
        done = await ended(client, uuid, sibling, generate_chronicle=False)

        response = await finish(client, uuid, outer)
        details = assert_error(response, 409, "thread_has_active_children")
        assert details == {"thread_id": outer, "active": [inner, innermost]}
        answer = await ended(client, uuid, outer, cascade=True)
        assert answer["status"] == "completed"

        found = await rows(client, uuid)
        statuses = {i: found[i]["status"] for i in (outer, inner, innermost, sibling)}
        assert statuses == {
            outer: "completed",
            inner: "aborted",
            innermost: "aborted",
            sibling: "completed",
        }
        assert found[inner]["completed_at"] is not None
        assert found[innermost]["completed_at"] is not None
        assert found[sibling]["completed_at"] == done["completed_at"]

        jobs = await chronicle_jobs(client, uuid)
        assert sorted(jobs) == sorted([outer, inner])  # innermost has nothing to chronicle
        assert jobs[inner]["status"] == "succeeded", jobs[inner]
        assert jobs[inner]["result"]["embedded"] is True
        assert jobs[outer]["result"]["embedded"] is True
        found = await rows(client, uuid)
        assert found[inner]["chronicle_summary"] == CHRONICLE
        assert found[innermost]["chronicle_summary"] is None

        sent = {prompt_and_text(r) for r in fake_llm.requests}
        assert len(sent) == 2
        partial = [text for prompt, text in sent if prompt == DEFAULT_PROMPT + PARTIAL]
        whole = [text for prompt, text in sent if prompt == DEFAULT_PROMPT]
        assert len(partial) == len(whole) == 1
        assert "INNER:" in partial[0]
        assert "THREAD:" not in partial[0]
        assert "INNER:" not in whole[0]
        assert "THREAD:" in whole[0]
        assert "[Thread aborted: inner]" in whole[0]  # outer's chronicle came after inner's

        assert len(embeddings(records(context_dir, uuid, outer), inner)) == 1
        assert len(embeddings(records(context_dir, uuid), outer)) == 1
        await assert_parent_shows(
            client,
            uuid,
            parent=0,
            thread_id=outer,
            status="completed",
            chronicle=CHRONICLE,
            label="outer",
        )
        for action in ("end", "abort"):
            for thread_id in (outer, inner, innermost):
                response = await finish(client, uuid, thread_id, action, cascade=True)
                assert_error(response, 409, "thread_not_active")


async def test_a_cascade_without_a_chronicle_still_chronicles_the_aborted_descendants(
    llm_client: httpx.AsyncClient,
) -> None:
    uuid, outer = await scene(llm_client, label="outer")
    inner = (await start(llm_client, uuid, parent_thread_id=outer, label="inner"))["thread_id"]
    await append(llm_client, uuid, *THREAD_TURNS, thread_id=inner)
    answer = await ended(llm_client, uuid, outer, "abort", cascade=True, generate_chronicle=False)
    assert answer["status"] == "aborted"
    jobs = await chronicle_jobs(llm_client, uuid)
    assert sorted(jobs) == [inner]
    assert jobs[inner]["result"]["embedded"] is True  # into outer, aborted as it is
    assert (await rows(llm_client, uuid))[outer]["chronicle_summary"] is None


# -- the task's end --------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["complete", "fail"])
async def test_finishing_the_task_aborts_its_active_threads_without_chronicles(
    client: httpx.AsyncClient, action: str
) -> None:
    uuid, outer = await scene(client, label="outer")
    inner = (await start(client, uuid, parent_thread_id=outer))["thread_id"]
    body = {"error_message": "tests failed"} if action == "fail" else None
    assert (await client.post(f"/tasks/{uuid}/{action}", json=body)).status_code == 200
    found = await rows(client, uuid)
    assert [found[i]["status"] for i in (outer, inner)] == ["aborted", "aborted"]
    assert all(found[i]["completed_at"] is not None for i in (outer, inner))
    assert await jobs_of(client, uuid, "chronicle") == []

    response = await send(client, uuid, {"role": "user", "content": "x"}, outer)
    assert_error(response, 409, "task_not_writable")
    for verb in ("end", "abort"):
        assert_error(await finish(client, uuid, outer, verb), 409, "task_not_writable")
    assert_error(
        await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": outer}),
        409,
        "task_not_writable",
    )
    # Still readable: the thread's payload and the root's, where the anchor says it was aborted.
    assert THREAD_TURNS[1]["content"] in await payload_text(client, uuid, "openai", outer)
    text = await payload_text(client, uuid, "openai")
    assert re.search(rf"\[Thread: outer\]\n- ID: {outer}\n.*\n- Ended: aborted {WHEN}\n", text)


async def test_a_task_finished_while_the_chronicle_is_written_keeps_it_on_the_row_only(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.set("ok", text=CHRONICLE, delay=1.0)
    async with running_app(chronicle_settings(context_dir, fake_llm)) as client:
        uuid, thread_id = await scene(client)
        await ended(client, uuid, thread_id)
        await until(lambda: bool(fake_llm.requests))
        assert (await client.post(f"/tasks/{uuid}/complete")).status_code == 200
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["status"] == "succeeded", job
        assert job["result"]["embedded"] == "task_not_writable"
        row = (await rows(client, uuid))[thread_id]
        assert (row["status"], row["chronicle_summary"]) == ("completed", CHRONICLE)
        assert embeddings(records(context_dir, uuid), thread_id) == []


# -- which summariser ------------------------------------------------------------------------


async def test_a_task_that_chose_the_extractive_summariser_gets_an_extractive_chronicle(
    context_dir: Path, fake_llm: FakeLLM
) -> None:
    """summary_backend is the task's choice for every summary it gets (condense, final
    summary, chronicle), even with a chat backend configured as the default."""
    async with running_app(chronicle_settings(context_dir, fake_llm)) as client:
        uuid = (await create_task(client, summary_backend="extractive"))["uuid"]
        thread_id = (await start(client, uuid, label=LABEL))["thread_id"]
        await append(client, uuid, *THREAD_TURNS, thread_id=thread_id)
        await ended(client, uuid, thread_id)
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["result"]["summarizer"] == "extractive", job
        assert fake_llm.requests == []
        chronicle = (await rows(client, uuid))[thread_id]["chronicle_summary"]
        assert THREAD_TURNS[0]["content"] in chronicle
