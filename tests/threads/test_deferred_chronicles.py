"""The lead's review fixes to threads (SPEC §8, seed 003), through the API.

- Idempotency keys are per context and cannot collide: the service's own keys (a thread's,
  a chronicle's) start with a control character no client key may carry.
- Calibration compares a reported usage with the root's payload only.
- The pinned plan is the root's: a thread's payload neither carries nor counts it.
- Nested ends: a thread's chronicle waits for those under it, and tells of them.
- A paused task puts the chronicle's embedding off without spending the job's attempts.
- Thread ids far out of range are 422, never 500.
"""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.context.store import SERVICE_KEY
from tests.conftest import snapshot_dir
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM
from tests.support.payloads import context_view, served
from tests.support.tasks import assert_error, create_task
from tests.support.waits import WAIT_S, fast_settings, jobs_of, running_app, until
from tests.threads.test_end import (
    CHRONICLE,
    FORMATS,
    LABEL,
    ROOT_TURN,
    THREAD_TURNS,
    assert_parent_shows,
    chronicle_jobs,
    embedded_text,
    embeddings,
    ended,
    payload_text,
    post,
    prompt_and_text,
    records,
    rows,
    scene,
    send,
    settings_for,
)
from tests.threads.test_payloads import history
from tests.threads.test_tree import start

fake_llm = llm_server.fake_llm

MESSAGE = {"role": "user", "content": "run the tests again"}
PLAN = "PLAN-7: guard parse() against empty input, then run test_parser.py"


async def keyed(
    client: httpx.AsyncClient, uuid: str, key: str, thread_id: int = 0
) -> httpx.Response:
    """POST MESSAGE to a context with an Idempotency-Key."""
    return await client.post(
        f"/tasks/{uuid}/messages",
        params={"thread_id": thread_id},
        json=MESSAGE,
        headers={"Idempotency-Key": key},
    )


def appended(response: httpx.Response) -> list[int]:
    """The seqs of an append that was not a replay."""
    assert response.status_code == 201, response.text
    assert "Idempotent-Replayed" not in response.headers, response.json()
    seqs: list[int] = response.json()["seqs"]
    return seqs


def replayed(response: httpx.Response) -> list[int]:
    assert response.status_code == 201, response.text
    assert response.headers.get("Idempotent-Replayed") == "true", response.json()
    seqs: list[int] = response.json()["seqs"]
    return seqs


async def last_seq(client: httpx.AsyncClient, uuid: str, thread_id: int = 0) -> int:
    seq: int = (await history(client, uuid, thread_id))[-1]["seq"]
    return seq


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


# -- 1. idempotency keys ---------------------------------------------------------------------


async def test_a_thread_s_key_never_answers_a_root_post(context_dir: Path) -> None:
    """The thread's key is stored with the thread's id in front; root keys that spell that
    ("thread-1:abc") or repeat the client's ("abc") are keys of their own."""
    async with running_app(fast_settings(context_dir)) as client:
        uuid = (await create_task(client))["uuid"]
        await post(client, uuid, ROOT_TURN)
        thread_id = (await start(client, uuid))["thread_id"]
        assert appended(await keyed(client, uuid, "abc", thread_id)) == [1]
        last = await last_seq(client, uuid)
        for number, key in enumerate((f"thread-{thread_id}:abc", "abc"), start=1):
            assert appended(await keyed(client, uuid, key)) == [last + number]
        assert await last_seq(client, uuid) == last + 2
        # Each key still replays its own context's answer, and only that.
        assert replayed(await keyed(client, uuid, "abc", thread_id)) == [1]
        assert replayed(await keyed(client, uuid, "abc")) == [last + 2]
        assert replayed(await keyed(client, uuid, f"thread-{thread_id}:abc")) == [last + 1]
        assert await last_seq(client, uuid, thread_id) == 1


async def test_a_client_s_chronicle_key_does_not_block_the_embedding(context_dir: Path) -> None:
    """No LLM configured: the extractive summariser writes the chronicle."""
    async with running_app(fast_settings(context_dir)) as client:
        uuid, thread_id = await scene(client)
        client_key = f"chronicle-{thread_id}"
        mine = appended(await keyed(client, uuid, client_key))
        await ended(client, uuid, thread_id)
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["status"] == "succeeded", job
        assert job["result"] == {
            "thread_id": thread_id,
            "summarizer": "extractive",
            "embedded": True,
        }
        found = records(context_dir, uuid)
        (embedding,) = embeddings(found, thread_id)
        chronicle = (await rows(client, uuid))[thread_id]["chronicle_summary"]
        assert embedding["content"] == embedded_text("completed", LABEL, chronicle)
        assert embedding["seq"] == found[-1]["seq"] == mine[0] + 1
        for fmt in FORMATS:
            text = await payload_text(client, uuid, fmt)
            assert text.count(f"[Thread completed: {LABEL}]") == 1, fmt
        assert replayed(await keyed(client, uuid, client_key)) == mine  # the client's answer


@pytest.mark.parametrize("service_key", ["thread-1:abc", "chronicle-1"])
async def test_a_client_key_with_the_service_s_prefix_reaches_no_service_key(
    context_dir: Path, service_key: str
) -> None:
    """SERVICE_KEY is all that keeps the service's keys apart from clients', so the app must
    refuse it in a client's key (or keep that key apart) itself: the HTTP parser is no
    guarantee (uvicorn's h11 parser passes "\\x1f" in a header value, as the ASGI transport
    here does; only httptools refuses it)."""
    async with running_app(fast_settings(context_dir)) as client:
        uuid, thread_id = await scene(client)
        assert thread_id == 1
        appended(await keyed(client, uuid, "abc", thread_id))
        before = await last_seq(client, uuid)
        response = await keyed(client, uuid, SERVICE_KEY + service_key)
        if response.status_code == 422:
            assert_error(response, 422, "validation_error")
            assert await last_seq(client, uuid) == before
        else:
            assert appended(response) == [before + 1]
        await ended(client, uuid, thread_id)
        job = (await chronicle_jobs(client, uuid))[thread_id]
        assert job["status"] == "succeeded", job
        assert job["result"]["embedded"] is True
        assert len(embeddings(records(context_dir, uuid), thread_id)) == 1


# -- 2. calibration --------------------------------------------------------------------------


async def calibration(client: httpx.AsyncClient, uuid: str) -> tuple[float, int]:
    """The task's calibration factor and samples; GET /tasks/{uuid} agrees on the factor."""
    shown = (await context_view(client, uuid, 0))["calibration"]
    task = (await client.get(f"/tasks/{uuid}")).json()
    assert task["context"]["calibration"] == shown["factor"]
    return shown["factor"], shown["samples"]


async def report(
    client: httpx.AsyncClient, uuid: str, prompt_tokens: int, thread_id: int = 0
) -> None:
    """An assistant answer carrying its call's usage."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 5}
    answer = {"role": "assistant", "content": "The guard is in.", "usage": usage}
    response = await send(client, uuid, answer, thread_id)
    assert response.status_code == 201, response.text


async def calibration_scene(client: httpx.AsyncClient) -> tuple[str, int, int]:
    """A root costing about twice the thread's payload, so that a report about the one
    compared with the other would move the factor; the uuid, the thread and the root's
    counted tokens as served (which records them for the next report)."""
    uuid = (await create_task(client, system_prompt="You are a coding agent."))["uuid"]
    await post(client, uuid, {"role": "user", "content": "ROOT: " + "fix the parser " * 150})
    thread_id = (await start(client, uuid))["thread_id"]
    await post(client, uuid, *THREAD_TURNS, thread_id=thread_id)
    root = int((await served(client, uuid, 0)).headers["X-Context-Tokens"])
    return uuid, thread_id, root


async def test_a_thread_s_payload_is_no_evidence_for_the_calibration(
    client: httpx.AsyncClient,
) -> None:
    uuid, thread_id, root = await calibration_scene(client)
    answer = await client.get(f"/tasks/{uuid}/request", params={"thread_id": thread_id})
    assert answer.status_code == 200, answer.text  # the provider's (openai) format
    thread = int(answer.headers["X-Context-Tokens"])
    assert 1.25 <= root / thread <= 3, (root, thread)  # compared, it would move the factor
    await report(client, uuid, root)
    assert await calibration(client, uuid) == (1.0, 1)  # compared with the root's payload


async def test_a_usage_reported_in_a_thread_never_calibrates(client: httpx.AsyncClient) -> None:
    uuid, thread_id, root = await calibration_scene(client)
    await report(client, uuid, 2 * root, thread_id)
    assert await calibration(client, uuid) == (1.0, 0)
    answer = await served(client, uuid, thread_id)
    assert answer.headers["X-Token-Calibration"] == "1.0"
    # The root's served payload still waits for its own report.
    await report(client, uuid, root)
    assert await calibration(client, uuid) == (1.0, 1)


# -- 3. the pinned plan ----------------------------------------------------------------------


async def counts(client: httpx.AsyncClient, uuid: str, thread_id: int) -> dict[str, Any]:
    """Per format: the payload's X- headers, and whether the plan is in its text."""
    found: dict[str, Any] = {}
    for fmt in FORMATS:
        answer = await served(client, uuid, thread_id, fmt)
        headers = {k: v for k, v in answer.headers.items() if k.startswith("x-")}
        found[fmt] = (headers, answer.text.count(PLAN))
    view = await context_view(client, uuid, thread_id)
    found["context"] = (view["tokens"], view["protected_tokens"], str(view).count(PLAN))
    return found


async def test_the_pinned_plan_is_the_root_s_alone(client: httpx.AsyncClient) -> None:
    uuid = (await create_task(client, system_prompt="You are a coding agent.", pin_plan=True))[
        "uuid"
    ]
    await post(client, uuid, ROOT_TURN)
    thread_id = (await start(client, uuid, label=LABEL))["thread_id"]
    await post(client, uuid, *THREAD_TURNS, thread_id=thread_id)
    root_before = await counts(client, uuid, 0)
    thread_before = await counts(client, uuid, thread_id)

    response = await client.post(
        f"/tasks/{uuid}/planning", json={"plan_type": "initial", "plan_content": PLAN}
    )
    assert response.status_code == 201, response.text

    root_after = await counts(client, uuid, 0)
    for fmt in FORMATS:
        (before, absent), (after, present) = root_before[fmt], root_after[fmt]
        assert (absent, present) == (0, 1), fmt
        assert int(after["x-context-tokens"]) > int(before["x-context-tokens"]), fmt
    assert root_after["context"][2] == 1
    assert root_after["context"][0] > root_before["context"][0]
    # The thread's payloads, their headers (X-Thread-Tokens, X-Context-Tokens,
    # X-Protected-Tokens) and its /context are as they were before the plan.
    assert await counts(client, uuid, thread_id) == thread_before
    assert all(thread_before[fmt][1] == 0 for fmt in FORMATS)
    assert all("x-thread-tokens" in thread_before[fmt][0] for fmt in FORMATS)


# -- 4. nested ends --------------------------------------------------------------------------

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
    async with running_app(settings_for(context_dir, fake_llm, job_backoff_s=0.05)) as client:
        uuid, child = await scene(client, label="C")
        grand = (await start(client, uuid, parent_thread_id=child, label="G"))["thread_id"]
        await post(client, uuid, *GRAND_TURNS, thread_id=grand)
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
    settings = settings_for(context_dir, fake_llm, job_max_attempts=1, job_backoff_s=0.05)
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


# -- 6. ids out of range ---------------------------------------------------------------------


async def test_thread_ids_far_out_of_range_are_422_and_depth_refusals_say_why(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    uuid = (await create_task(client))["uuid"]
    child = (await start(client, uuid))["thread_id"]
    grand = (await start(client, uuid, parent_thread_id=child))["thread_id"]
    before, tree = snapshot_dir(context_dir), (await client.get(f"/tasks/{uuid}/threads")).json()
    huge = 2**70
    response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": huge})
    assert_error(response, 422, "validation_error")
    for action in ("end", "abort"):
        response = await client.post(f"/tasks/{uuid}/threads/{huge}/{action}", json={})
        assert_error(response, 422, "validation_error")
    response = await send(client, uuid, MESSAGE, huge)
    assert_error(response, 422, "validation_error")
    response = await client.get(f"/tasks/{uuid}/request", params={"thread_id": huge})
    assert_error(response, 422, "validation_error")

    response = await client.post(f"/tasks/{uuid}/threads", json={"parent_thread_id": grand})
    assert assert_error(response, 409, "thread_depth_exceeded") == {"level": 4, "max_depth": 3}
    assert snapshot_dir(context_dir) == before
    assert (await client.get(f"/tasks/{uuid}/threads")).json() == tree
