"""Helpers of the lifecycle tests: the app with fast jobs, waiting on background work."""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from tests.conftest import running_app as running_app
from tests.fakes.llm_server import FakeLLM
from tests.support.tasks import create_task

WAIT_S = 60.0  # a bound for failing tests, not a pace: waits end when their condition holds


def fast_settings(context_dir: Path, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "context_dir": context_dir,
        "fsync": "never",
        "job_poll_s": 0.05,
        "job_backoff_s": 0.05,
        "token_counter": "heuristic",
    }
    return Settings(**(values | extra))


def llm_settings(context_dir: Path, fake: FakeLLM, **extra: Any) -> Settings:
    """Fast settings with the fake LLM server as the default (OpenAI-compatible) backend."""
    values = {"llm_backend": "openai", "llm_base_url": fake.base_url, "llm_model": "fake-model"}
    return fast_settings(context_dir, **(values | extra))


def turns(count: int, words: int = 400, prefix: str = "turn") -> list[dict[str, Any]]:
    """Alternating user and assistant messages, "<prefix> <i>: x x x ..." (``words`` x's)."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{prefix} {i}: " + "x " * words}
        for i in range(count)
    ]


async def final_summary(client: httpx.AsyncClient, uuid: str) -> dict[str, Any]:
    """GET /final-summary until it is no longer pending."""
    deadline = time.monotonic() + WAIT_S
    while True:
        response = await client.get(f"/tasks/{uuid}/final-summary")
        body: dict[str, Any] = response.json()
        if response.status_code != 202:
            assert response.status_code == 200, response.text
            return body
        assert body["status"] == "pending"
        assert body["job"]["kind"] == "final_summary"
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition()`` holds."""
    deadline = time.monotonic() + WAIT_S
    while True:
        if condition():
            return
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def jobs_of(
    client: httpx.AsyncClient, uuid: str, kind: str | None = None
) -> list[dict[str, Any]]:
    """The task's jobs (of ``kind``), newest first."""
    response = await client.get("/jobs", params={"task_uuid": uuid, "limit": 1000})
    assert response.status_code == 200, response.text
    return [job for job in response.json()["jobs"] if kind is None or job["kind"] == kind]


async def settled_jobs(
    client: httpx.AsyncClient, uuid: str, kind: str | None = None, *, at_least_one: bool = True
) -> list[dict[str, Any]]:
    """The task's jobs (of ``kind``) once none is queued or running, and (``at_least_one``)
    once there is one."""
    deadline = time.monotonic() + WAIT_S
    while True:
        jobs = await jobs_of(client, uuid, kind)
        if (jobs or not at_least_one) and all(
            job["status"] not in ("queued", "running") for job in jobs
        ):
            return jobs
        assert time.monotonic() < deadline, jobs
        await asyncio.sleep(0.05)


async def run_and_finish(
    client: httpx.AsyncClient,
    action: str = "complete",
    *,
    messages: list[dict[str, Any]] | None = None,
    plans: tuple[str, ...] = (),
    **task: Any,
) -> dict[str, Any]:
    """A task with a short conversation and planning entries, completed or failed."""
    created = await create_task(client, system_prompt="You are a coding agent.", **task)
    uuid = created["uuid"]
    conversation = messages or [
        {"role": "user", "content": "Fix the crash in parser.py when the input is empty."},
        {"role": "assistant", "content": "I will read parser.py and add a guard."},
    ]
    response = await client.post(f"/tasks/{uuid}/messages", json={"messages": conversation})
    assert response.status_code == 201, response.text
    for number, plan in enumerate(plans):
        kind = "initial" if number == 0 else "revision"
        response = await client.post(
            f"/tasks/{uuid}/planning", json={"plan_type": kind, "plan_content": plan}
        )
        assert response.status_code == 201, response.text
    body = {"error_message": "tests failed: test_empty_input"} if action == "fail" else None
    response = await client.post(f"/tasks/{uuid}/{action}", json=body)
    assert response.status_code == 200, response.text
    finished: dict[str, Any] = response.json()
    return finished
