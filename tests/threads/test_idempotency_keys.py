"""Idempotency keys of threads (SPEC §8, seed 003): keys are per context and cannot collide;
the service's own keys (a thread's, a chronicle's) start with a control character no client
key may carry."""

from pathlib import Path

import httpx
import pytest

from app.context.store import SERVICE_KEY
from tests.support.app import running_app
from tests.support.errors import assert_error
from tests.support.settings import fast_settings
from tests.support.tasks import all_messages, append, create_task
from tests.support.threads import (
    FORMATS,
    LABEL,
    ROOT_TURN,
    chronicle_jobs,
    embedded_text,
    embeddings,
    ended,
    payload_text,
    records,
    rows,
    scene,
    start,
)

MESSAGE = {"role": "user", "content": "run the tests again"}


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
    seq: int = (await all_messages(client, uuid, thread_id, limit=3))[-1]["seq"]
    return seq


async def test_a_thread_s_key_never_answers_a_root_post(context_dir: Path) -> None:
    """The thread's key is stored with the thread's id in front; root keys that spell that
    ("thread-1:abc") or repeat the client's ("abc") are keys of their own."""
    async with running_app(fast_settings(context_dir)) as client:
        uuid = (await create_task(client))["uuid"]
        await append(client, uuid, ROOT_TURN)
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
