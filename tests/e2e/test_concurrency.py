"""Many clients appending to one task at once, on real servers: one process, two uvicorn
workers, and two separate processes sharing CONTEXT_DIR. seq must stay 1..N without gaps or
duplicates, and every acknowledged message must be stored exactly once, where its ack said."""

import asyncio
import itertools
from typing import Any

import httpx
import pytest

from tests.support.schemas import validate_openai_request
from tests.support.server import ServerPool, assert_seqs_contiguous, client_limits, jsonl_records
from tests.support.tasks import SYSTEM_PROMPT, all_messages, task_body

pytestmark = pytest.mark.e2e

CLIENTS = 50
PER_CLIENT = 10
# How each client splits its 10 messages into POSTs: singles and batches of 2 or 3.
PATTERNS = [[1] * 10, [2, 1, 3, 1, 2, 1], [3, 3, 2, 2], [1, 2, 1, 2, 1, 3]]


async def _client(
    http: httpx.AsyncClient, uuid: str, client: int, wave: int
) -> list[tuple[int, str]]:
    """Post this client's messages one request after another; return its (seq, content) acks."""
    acks: list[tuple[int, str]] = []
    sent = 0
    for size in PATTERNS[client % len(PATTERNS)]:
        marked = f"wave {wave} " if wave else ""
        contents = [f"{marked}client {client:02d} message {sent + k:02d}" for k in range(size)]
        messages = [{"role": "user", "content": c} for c in contents]
        body = messages[0] if size == 1 else {"messages": messages}
        response = await http.post(f"/tasks/{uuid}/messages", json=body)
        assert response.status_code == 201, response.text
        seqs = response.json()["seqs"]
        assert seqs == list(range(seqs[0], seqs[0] + size)), "a batch's seqs are consecutive"
        acks += zip(seqs, contents, strict=True)
        sent += size
    assert sent == PER_CLIENT
    return acks


async def _append_concurrently(base_urls: list[str], uuid: str, wave: int = 0) -> dict[int, str]:
    """CLIENTS clients at once, spread over the servers; returns every ack as seq -> content.
    A ``wave`` after the first marks its contents, so that none repeats an earlier one."""
    limits = client_limits(CLIENTS)
    https = [httpx.AsyncClient(base_url=u, timeout=120, limits=limits) for u in base_urls]
    try:
        per_client = await asyncio.gather(
            *(_client(https[i % len(https)], uuid, i, wave) for i in range(CLIENTS))
        )
    finally:
        for http in https:
            await http.aclose()
    for acks in per_client:
        # Each client waited for every answer before its next POST: its seqs increase.
        assert [s for s, _ in acks] == sorted(s for s, _ in acks)
    all_acks = [ack for acks in per_client for ack in acks]
    acked = dict(all_acks)
    assert len(acked) == len(all_acks) == CLIENTS * PER_CLIENT, "a seq was acknowledged twice"
    return acked


async def _check_task(
    http: httpx.AsyncClient, uuid: str, acked: dict[int, str], pool: ServerPool
) -> None:
    total = 1 + CLIENTS * PER_CLIENT
    history = await all_messages(http, uuid, limit=97)
    assert_seqs_contiguous(history)
    assert len(history) == total
    assert history[0]["content"] == SYSTEM_PROMPT
    stored = {r["seq"]: r["content"] for r in history[1:]}
    assert stored == acked, "the stored seqs and contents are exactly the acknowledged ones"
    contents = [r["content"] for r in history]
    assert len(set(contents)) == total, "a message was stored twice"

    response = await http.get(f"/tasks/{uuid}/request")
    assert response.status_code == 200, response.text
    payload = response.json()
    validate_openai_request(payload)
    assert [m["content"] for m in payload["messages"]] == contents

    task = (await http.get(f"/tasks/{uuid}")).json()
    assert task["statistics"]["total_messages"] == total
    assert task["context"]["last_seq"] == total
    assert task["context"]["messages"] == total

    directory = pool.context_dir / "running" / uuid
    on_disk = jsonl_records(directory / "messages.jsonl")
    assert_seqs_contiguous(on_disk)
    assert [r["content"] for r in on_disk] == contents
    assert jsonl_records(directory / "current.jsonl") == payload["messages"]


@pytest.mark.parametrize(
    ("workers", "processes"),
    [(1, 1), (2, 1), (1, 2)],
    ids=["one-process", "two-workers", "two-processes"],
)
async def test_concurrent_appends_to_one_task(
    servers: ServerPool, workers: int, processes: int
) -> None:
    """50 concurrent clients x 10 messages (singles and batches) to one task: seqs 1..N with
    no gaps or duplicates, each message stored once under the seq its ack returned, in the
    payload in seq order, and messages.jsonl on disk agrees line by line."""
    started = [servers.start(workers=workers) for _ in range(processes)]
    if workers > 1:
        assert len(started[0].worker_pids()) == workers
    base_urls = [s.base_url for s in started]
    async with httpx.AsyncClient(base_url=base_urls[0], timeout=60) as http:
        created = await http.post("/tasks", json=task_body(system_prompt=SYSTEM_PROMPT))
        assert created.status_code == 201, created.text
        uuid: str = created.json()["uuid"]

        acked = await _append_concurrently(base_urls, uuid)

        await _check_task(http, uuid, acked, servers)
    if processes > 1:
        # The other process serves the same, consistent state.
        async with httpx.AsyncClient(base_url=base_urls[1], timeout=60) as other:
            await _check_task(other, uuid, acked, servers)


async def _settled_jobs(http: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    """The task's jobs once none is queued or running."""
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        response = await http.get("/jobs", params={"task_uuid": uuid, "limit": 1000})
        assert response.status_code == 200, response.text
        jobs: list[dict[str, Any]] = response.json()["jobs"]
        if not any(job["status"] in ("queued", "running") for job in jobs):
            return jobs
        assert asyncio.get_running_loop().time() < deadline, jobs
        await asyncio.sleep(0.2)


async def test_condense_jobs_run_once_across_two_processes(servers: ServerPool) -> None:
    """Two processes of two workers each (four job runners) share the database and CONTEXT_DIR;
    50 writers split across them fill a small window, twice, so appends queue condense jobs
    over and over. Every seq is stored once, and every condense job ran exactly once: one
    attempt, one summary per compaction that condensed, each reaching further than the last."""
    env = {"JOB_POLL_S": "0.05", "FSYNC": "never"}
    started = [servers.start(workers=2, env=env) for _ in range(2)]
    base_urls = [s.base_url for s in started]
    async with httpx.AsyncClient(base_url=base_urls[0], timeout=60) as http:
        body = task_body(system_prompt=SYSTEM_PROMPT, context_length=1500, max_output_tokens=200)
        created = await http.post("/tasks", json=body)
        assert created.status_code == 201, created.text
        uuid: str = created.json()["uuid"]

        # Two waves, the second once the first's jobs have ended: a condense can take longer
        # than a whole wave (its digest's process starts on first use), and the window must
        # force compaction more than once whatever the timing.
        acked = await _append_concurrently(base_urls, uuid)
        await _settled_jobs(http, uuid)
        acked |= await _append_concurrently(base_urls, uuid, wave=1)
        jobs = await _settled_jobs(http, uuid)

        history = await all_messages(http, uuid, limit=97)
        assert_seqs_contiguous(history)
        stored = {r["seq"]: r["content"] for r in history}
        assert {seq: stored[seq] for seq in acked} == acked
        # The rest is the system prompt and the summaries the condenses appended.
        appended = [r for r in history[1:] if r["seq"] not in acked]

        condenses = [job for job in jobs if job["kind"] == "condense"]
        assert all(job["status"] in ("succeeded", "skipped") for job in condenses), condenses
        assert all(job["attempts"] == 1 for job in condenses), condenses
        condensed = [job for job in condenses if job["result"]["kind"] == "condense"]
        assert len(condensed) >= 2, condenses  # the window forced compaction more than once

        response = await http.get(f"/tasks/{uuid}/summaries", params={"limit": 1000})
        summaries = [s for s in response.json()["summaries"] if s["kind"] == "condense"]
        assert sorted(s["id"] for s in summaries) == sorted(
            job["result"]["summary_id"] for job in condensed
        ), "one summary per condensing job, none twice"
        assert len(appended) == len(condensed)
        assert all(r["content"].startswith("[Summary of the earlier") for r in appended)
        for earlier, later in itertools.pairwise(summaries):
            # A condense re-summarises what the last summary covered and newer messages.
            assert earlier["end_seq"] < later["end_seq"], "each condense covered new messages"

        payload = (await http.get(f"/tasks/{uuid}/request")).json()
        validate_openai_request(payload)
