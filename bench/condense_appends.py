"""Appends to a 5,000-message context while a condense of it runs, against the same appends to
an idle one: how long an append waits for compaction work under the task lock."""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from bench.harness import (
    Report,
    Service,
    Table,
    async_http_client,
    create_task,
    http_client,
    percentile,
)

MESSAGES = 5_000
BATCH = 500  # messages per POST while filling a context
WINDOW = 100_000_000  # no compaction but the one asked for
MESSAGE = "the parser test fails after the refactor of the tokenizer; trying a smaller fix " * 3
ROUNDS = 3  # contexts condensed, each with appends running beside its condense


def fill(client: httpx.Client, messages: int) -> str:
    """A task whose context holds ``messages`` messages, alternating user and assistant."""
    task_uuid = create_task(client, WINDOW)
    for start in range(0, messages, BATCH):
        batch = [
            {"role": "user" if (start + i) % 2 == 0 else "assistant", "content": MESSAGE}
            for i in range(min(BATCH, messages - start))
        ]
        client.post(f"/tasks/{task_uuid}/messages", json={"messages": batch}).raise_for_status()
    return task_uuid


async def appends_until(
    client: httpx.AsyncClient, task_uuid: str, done: asyncio.Event, least: int
) -> list[float]:
    """One agent appending to a task until ``done`` is set and at least ``least`` appended:
    each append's latency in ms."""
    latencies: list[float] = []
    message = {"role": "user", "content": MESSAGE}
    while not done.is_set() or len(latencies) < least:
        started = time.perf_counter()
        response = await client.post(f"/tasks/{task_uuid}/messages", json=message)
        response.raise_for_status()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def measure(service: Service, tasks: list[tuple[str, str]]) -> dict[str, Any]:
    """For each (idle task, task to condense): appends to the idle one alone, then appends to
    the other while its condense runs."""
    idle: list[float] = []
    busy: list[float] = []
    condense_s: list[float] = []
    async with async_http_client(service, 2, timeout=600) as client:
        for idle_task, condensed_task in tasks:
            done = asyncio.Event()
            done.set()
            idle += await appends_until(client, idle_task, done, least=200)

            done = asyncio.Event()
            agent = asyncio.create_task(appends_until(client, condensed_task, done, least=20))
            await asyncio.sleep(0.05)  # the agent's appends are under way
            started = time.perf_counter()
            response = await client.post(
                f"/tasks/{condensed_task}/compress", json={"strategy": "condense"}
            )
            response.raise_for_status()
            assert response.json()["kind"] == "condense", response.json()
            condense_s.append(time.perf_counter() - started)
            done.set()
            busy += await agent
    return {"idle_ms": idle, "busy_ms": busy, "condense_s": condense_s}


def run(quick: bool, scratch: Path) -> Report:
    messages = 200 if quick else MESSAGES
    rounds = 1 if quick else ROUNDS
    with Service(scratch / "contexts") as service, http_client(service, timeout=600) as client:
        tasks = [(fill(client, messages), fill(client, messages)) for _ in range(rounds)]
        data = asyncio.run(measure(service, tasks))
    rows = []
    for label, key in (("idle", "idle_ms"), ("while a condense runs", "busy_ms")):
        values = data[key]
        p50, p99 = percentile(values, 50), percentile(values, 99)
        rows.append([label, len(values), round(p50, 2), round(p99, 2), round(max(values), 1)])
    idle_p99, busy_p99 = rows[0][3], rows[1][3]
    ratio = round(busy_p99 / idle_p99, 2) if idle_p99 else 0.0
    condense = ", ".join(f"{s:.2f}" for s in data["condense_s"])
    table = Table(
        f"appends to a {messages:,}-message context, one agent: idle, and while it is condensed",
        ["case", "appends", "p50 ms", "p99 ms", "max ms"],
        rows,
        [
            f"p99 while condensing / idle: {ratio}x. Each of {rounds} rounds: one agent appends",
            "to an idle context of that size, then to another while POST /compress condenses it",
            f"(extractive summariser; the condenses took {condense} s).",
        ],
    )
    return Report([table], data | {"p99_ratio": ratio, "messages": messages})
