"""Appends to a 5,000-message context while a condense of it runs, against the same appends to
an idle one: how long an append waits for compaction work. The summariser's CPU work in a
process of the service's own (the default) and in a worker thread of its process, side by side:
a service of each, measured in alternating rounds."""

import asyncio
import time
from contextlib import AsyncExitStack, ExitStack
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
# COMPACTION__SUMMARIZER_PROCESSES of each mode's service.
MODES = {"process": "1", "thread": "0"}
# A first condense, before the rounds, of a context this long: a service's summariser process
# starts at its first condense, and a running service has long started it.
WARM_UP_MESSAGES = 200


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


async def condense(client: httpx.AsyncClient, task_uuid: str) -> float:
    """POST /compress (a condense) of the task; how long it took in s."""
    started = time.perf_counter()
    response = await client.post(f"/tasks/{task_uuid}/compress", json={"strategy": "condense"})
    response.raise_for_status()
    assert response.json()["kind"] == "condense", response.json()
    return time.perf_counter() - started


async def measure_round(
    client: httpx.AsyncClient, idle_task: str, condensed_task: str, data: dict[str, list[float]]
) -> None:
    """Appends to the idle task alone, then appends to the other while its condense runs."""
    done = asyncio.Event()
    done.set()
    data["idle_ms"] += await appends_until(client, idle_task, done, least=200)

    done = asyncio.Event()
    agent = asyncio.create_task(appends_until(client, condensed_task, done, least=20))
    await asyncio.sleep(0.05)  # the agent's appends are under way
    data["condense_s"].append(await condense(client, condensed_task))
    done.set()
    data["busy_ms"] += await agent


async def measure(
    services: dict[str, Service], warm_up: dict[str, str], tasks: dict[str, list[tuple[str, str]]]
) -> dict[str, dict[str, Any]]:
    """Each mode's first condense, then its rounds, the modes' rounds alternating."""
    data: dict[str, dict[str, Any]] = {
        mode: {"idle_ms": [], "busy_ms": [], "condense_s": []} for mode in services
    }
    async with AsyncExitStack() as stack:
        clients = {
            mode: await stack.enter_async_context(async_http_client(service, 2, timeout=600))
            for mode, service in services.items()
        }
        for mode, client in clients.items():
            data[mode]["first_condense_s"] = await condense(client, warm_up[mode])
        for round_tasks in zip(*tasks.values(), strict=True):
            for mode, (idle_task, condensed_task) in zip(tasks, round_tasks, strict=True):
                await measure_round(clients[mode], idle_task, condensed_task, data[mode])
    return data


def run(quick: bool, scratch: Path) -> Report:
    messages = 200 if quick else MESSAGES
    rounds = 1 if quick else ROUNDS
    with ExitStack() as stack:
        services = {
            mode: stack.enter_context(
                Service(scratch / mode / "contexts", COMPACTION__SUMMARIZER_PROCESSES=processes)
            )
            for mode, processes in MODES.items()
        }
        warm_up: dict[str, str] = {}
        tasks: dict[str, list[tuple[str, str]]] = {}
        for mode, service in services.items():
            with http_client(service, timeout=600) as client:
                warm_up[mode] = fill(client, WARM_UP_MESSAGES)
                tasks[mode] = [
                    (fill(client, messages), fill(client, messages)) for _ in range(rounds)
                ]
        data = asyncio.run(measure(services, warm_up, tasks))
    rows: list[list[Any]] = []
    ratios: dict[str, float] = {}
    for mode, measured in data.items():
        idle_p99 = percentile(measured["idle_ms"], 99)
        for label, key in (("idle", "idle_ms"), ("while a condense runs", "busy_ms")):
            values = measured[key]
            p50, p99 = percentile(values, 50), percentile(values, 99)
            ratio = round(p99 / idle_p99, 2) if idle_p99 else 0.0
            row = [mode, label, len(values), round(p50, 2), round(p99, 2), round(max(values), 1)]
            rows.append([*row, f"{ratio}x"])
            ratios[mode] = ratio
    condenses = [
        f"{mode}: {', '.join(f'{s:.2f}' for s in measured['condense_s'])} s "
        f"(the first, of {WARM_UP_MESSAGES} messages: {measured['first_condense_s']:.2f} s)"
        for mode, measured in data.items()
    ]
    table = Table(
        f"appends to a {messages:,}-message context, one agent: idle, and while it is condensed",
        ["summariser", "case", "appends", "p50 ms", "p99 ms", "max ms", "p99 / idle p99"],
        rows,
        [
            f"p99 while condensing / idle: {ratios['process']}x with the digest in a",
            f"summariser process, {ratios['thread']}x in a worker thread. One service of each,",
            f"{rounds} rounds each, alternating: one agent appends to an idle context of that",
            "size, then to another while POST /compress condenses it (extractive summariser).",
            "Before the rounds, each service condensed a small context (the summariser's",
            "process starts then). The condenses took:",
            *condenses,
        ],
    )
    return Report(
        [table],
        {"modes": data, "p99_ratio": ratios["process"], "p99_ratio_thread": ratios["thread"]}
        | {"messages": messages},
    )
