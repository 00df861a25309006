"""Waiting on the app's background work (jobs, final summaries), bounded so that a test that
would hang fails instead."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

WAIT_S = 60.0  # a bound for failing tests, not a pace: waits end when their condition holds


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


async def settle(client: httpx.AsyncClient, timeout_s: float = 30.0) -> None:
    """Wait until no background job of any task (final summaries...) is queued or running."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        busy = []
        for status in ("queued", "running"):
            response = await client.get("/jobs", params={"status": status})
            assert response.status_code == 200, response.text
            busy += response.json()["jobs"]
        if not busy:
            return
        assert asyncio.get_running_loop().time() < deadline, f"jobs still pending: {busy}"
        await asyncio.sleep(0.05)


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
