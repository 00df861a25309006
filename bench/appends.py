"""Appends: messages/s and latency with 1, 8, 32 and 128 concurrent agents, each on its own task
and all on one task, with fsync on and off; beside them, in the same run, the limits of this
machine: a loop of append+fsync and of append alone on the same disk, and the HTTP floor (the
same client asking GET /healthz, which does no work).

Each agent appends one ~300-byte message per request, as fast as answers come, for a fixed
time after a warm-up. The server's and the client's CPU seconds per message show where the
time goes: on 2 cores, the load generator (httpx, one process) takes about one of them.
"""

import asyncio
import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
import psutil
from asgi_lifespan import LifespanManager
from starlette.types import ASGIApp, Message

from app.config import Settings, StorageSettings
from app.main import create_app
from bench.harness import (
    Report,
    Service,
    Table,
    async_http_client,
    cpu_seconds,
    create_task,
    http_client,
    percentile,
    task_body,
)

AGENTS = (1, 8, 32, 128)
MESSAGE = "the parser test fails after the refactor of the tokenizer; trying a smaller fix " * 3
# No compaction during the run: the in-process breakdown alone appends ~12,000 messages to one
# task (~0.7M tokens).
WINDOW = 10_000_000
JSON_HEADERS = {"content-type": "application/json"}


@dataclass
class Load:
    seconds: float
    latencies: list[float]
    server_cpu_s: float
    client_cpu_s: float

    @property
    def per_s(self) -> float:
        return len(self.latencies) / self.seconds

    def row(self) -> dict[str, Any]:
        count = len(self.latencies)
        return {
            "requests": count,
            "per_s": round(self.per_s, 1),
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 2),
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 2),
            "server_cpu_ms_per_request": round(self.server_cpu_s / count * 1000, 3),
            "client_cpu_ms_per_request": round(self.client_cpu_s / count * 1000, 3),
        }


async def drive(
    service: Service, requests: Sequence[tuple[str, str, bytes | None]], seconds: float
) -> Load:
    """One agent per (method, path, JSON body), each sending its request again and again: two
    untimed, then timed for ``seconds`` (all agents start the timed part together), over
    connections of their own. Bodies come encoded: the load generator shares the machine with
    the service, and what it spends on a request is taken from the service."""
    me = psutil.Process()
    latencies: list[float] = []
    ready = asyncio.Barrier(len(requests) + 1)
    stop = asyncio.Event()

    async def agent(client: httpx.AsyncClient, method: str, path: str, body: bytes | None) -> None:
        headers = None if body is None else JSON_HEADERS
        for _ in range(2):
            (await client.request(method, path, content=body, headers=headers)).raise_for_status()
        await ready.wait()
        while not stop.is_set():
            started = time.perf_counter()
            response = await client.request(method, path, content=body, headers=headers)
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()

    async with async_http_client(service, len(requests)) as client:
        agents = [asyncio.create_task(agent(client, *r)) for r in requests]
        await ready.wait()
        cpu = service.cpu_seconds(), cpu_seconds(me)
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*agents)
        elapsed = time.perf_counter() - started
    return Load(elapsed, latencies, service.cpu_seconds() - cpu[0], cpu_seconds(me) - cpu[1])


def raw_appends_per_s(directory: Path, *, fsync: bool, seconds: float) -> float:
    """The disk's own limit: the same line appended with os.write (and fsync'd) in a loop."""
    line = b'{"seq": 1, "role": "user", "content": "' + MESSAGE.encode() + b'"}\n'
    path = directory / f"raw-{'fsync' if fsync else 'nofsync'}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    count, started = 0, time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            for _ in range(1 if fsync else 1000):
                os.write(fd, line)
                if fsync:
                    os.fsync(fd)
            count += 1 if fsync else 1000
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.perf_counter() - started)


def work_after_waits(directory: Path, rounds: int) -> dict[str, float]:
    """This machine's price of waiting: the thread CPU (µs) of the same Python work (JSON
    round trips of the benchmark's message, like a request's parse and render) right after no
    wait, after an append+fsync of a line on the same disk, and after a 0.3 ms sleep. On a VM
    whose CPU sits idle during a wait, the work after it can cost more (colder caches, a
    slower clock), and an append pays that for its fsync where GET /healthz waits for nothing."""
    message = {"role": "user", "content": MESSAGE, "seq": 1, "tokens": [1, 2, 3]}
    path = directory / "waits.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = orjson.dumps(message) + b"\n"

    def fsync() -> None:
        os.write(fd, line)
        os.fsync(fd)

    waits: dict[str, Callable[[], object]] = {
        "no wait": lambda: None,
        "after an append + fsync": fsync,
        "after a 0.3 ms sleep": lambda: time.sleep(0.0003),
    }
    spent = dict.fromkeys(waits, 0.0)
    try:
        for _ in range(rounds):  # the waits take turns: they see the same moments
            for name, wait in waits.items():
                wait()
                started = time.thread_time()
                for _ in range(20):
                    orjson.loads(orjson.dumps(message))
                    json.loads(json.dumps(message))
                spent[name] += time.thread_time() - started
    finally:
        os.close(fd)
        path.unlink()
    return {name: round(seconds / rounds * 1e6, 1) for name, seconds in spent.items()}


def merged(loads: Sequence[Load]) -> Load:
    """The slices of one case as one load."""
    return Load(
        sum(load.seconds for load in loads),
        [latency for load in loads for latency in load.latencies],
        sum(load.server_cpu_s for load in loads),
        sum(load.client_cpu_s for load in loads),
    )


async def measure_service(
    service: Service, agents: tuple[int, ...], seconds: float, slices: int
) -> list[dict[str, Any]]:
    """At each concurrency, GET /healthz and the two append cases, ``seconds`` each, taken in
    ``slices`` turns (healthz, own tasks, one task, again): this machine's speed drifts by tens
    of percent within a minute, and a ratio of two cases holds only if both saw the same."""
    rows = []
    body = orjson.dumps({"role": "user", "content": MESSAGE})
    for count in agents:
        with http_client(service) as setup:
            own = [create_task(setup, WINDOW) for _ in range(count)]
            shared = create_task(setup, WINDOW)
        cases: dict[str, list[tuple[str, str, bytes | None]]] = {
            "GET /healthz": [("GET", "/healthz", None)] * count,
            "append, own tasks": [("POST", f"/tasks/{uuid}/messages", body) for uuid in own],
            "append, one task": [("POST", f"/tasks/{shared}/messages", body)] * count,
        }
        taken: dict[str, list[Load]] = {case: [] for case in cases}
        for _ in range(slices):
            for case, requests in cases.items():
                taken[case].append(await drive(service, requests, seconds / slices))
        floor = merged(taken["GET /healthz"])
        rows.append({"case": "GET /healthz", "agents": count, **floor.row()})
        for case in ("append, own tasks", "append, one task"):
            load = merged(taken[case])
            of_healthz = round(load.per_s / floor.per_s, 3)
            rows.append({"case": case, "agents": count, **load.row(), "of_healthz": of_healthz})
    return rows


# -- where an append's CPU goes, in-process --------------------------------------------------


async def asgi_call(
    app: ASGIApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """One request (``path`` may carry a query) handed to the app as a server would, with no
    client or socket around it: what it costs is the app's alone."""
    received = False
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal received
        if received:  # the app is done with the body: wait as a connection would
            await asyncio.Event().wait()
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    sent = [(b"host", b"bench"), (b"content-type", b"application/json"), *headers]
    path, _, query = path.partition("?")
    scope = {
        **{"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1"},
        **{"method": method, "scheme": "http", "path": path, "raw_path": path.encode()},
        **{"query_string": query.encode(), "root_path": "", "headers": sent},
        **{"client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)},
    }
    await app(scope, receive, send)
    return b"".join(chunks)


@asynccontextmanager
async def app_with_a_task(
    contexts: Path, fsync: Literal["always", "never"]
) -> AsyncIterator[tuple[ASGIApp, Any, str]]:
    """The app started in-process on ``contexts``: it, its store and one task's uuid."""
    settings = Settings(context_dir=contexts, storage=StorageSettings(fsync=fsync))
    async with LifespanManager(create_app(settings)) as started:
        # The lifespan's state (what requests see as request.state): the built services.
        app = started.app
        created = await asgi_call(app, "POST", "/tasks", orjson.dumps(task_body(WINDOW)))
        yield app, started._state["services"].store, orjson.loads(created)["uuid"]


async def cpu_ms_per_call(
    call: Callable[[], Awaitable[object]], count: int, settle: Callable[[], Awaitable[None]]
) -> float:
    """CPU per call, ``settle`` included: the calls' work left to the background (the heads
    and keys written behind) is theirs, not the next measure's."""
    for _ in range(count // 10):  # warm
        await call()
    await settle()
    started_cpu = time.process_time()
    for _ in range(count):
        await call()
    await settle()
    return round((time.process_time() - started_cpu) / count * 1000, 3)


async def breakdown(scratch: Path, count: int) -> list[tuple[str, float]]:
    """CPU ms per call of the append path's parts (process CPU: the worker threads count)."""
    body = orjson.dumps({"role": "user", "content": MESSAGE})
    rows = []
    async with app_with_a_task(scratch / "breakdown" / "contexts", "always") as (app, store, uuid):
        path = f"/tasks/{uuid}/messages"

        async def timed(
            label: str,
            call: Callable[[], Awaitable[object]],
            settle: Callable[[], Awaitable[None]] = store.write_behind.flush,
        ) -> float:
            ms = await cpu_ms_per_call(call, count, settle)
            rows.append((label, ms))
            return ms

        async def append_lock() -> None:
            async with store.locked(uuid, for_append=True):
                pass

        async def read_lock() -> None:
            async with store.locked(uuid):
                pass

        await timed(
            "GET /healthz through the ASGI stack", lambda: asgi_call(app, "GET", "/healthz")
        )
        whole = await timed(
            "POST /messages through the ASGI stack", lambda: asgi_call(app, "POST", path, body)
        )
        await timed(
            "for scale: POST /messages left to FastAPI's own handling (no fast lane)",
            lambda: asgi_call(app, "POST", f"{path}?via=fastapi", body),
        )
        keys = (f"step-{n}".encode() for n in itertools.count())
        await timed(
            "for scale: POST /messages with an Idempotency-Key (a new one each time)",
            lambda: asgi_call(app, "POST", path, body, [(b"idempotency-key", next(keys))]),
        )
        message = {"role": "user", "content": MESSAGE}
        appended = await timed(
            "the store's append", lambda: store.append(uuid, [dict(message)], None)
        )
        lock = await timed(
            "of which: task lock, the row remembered from the last append, files' sizes",
            append_lock,
        )
        rows.append(
            (
                "of which: the rest (group commit, size check, tokens, writes, fsync)",
                round(appended - lock, 3),
            )
        )
        rows.append(
            (
                "HTTP body, validation, response, middlewares (whole - store)",
                round(whole - appended, 3),
            )
        )
        await timed(
            "for scale: task lock, task row and head selected (any access but an append)",
            read_lock,
        )
    async with app_with_a_task(scratch / "no-fsync" / "contexts", "never") as (app, other, uuid):
        path = f"/tasks/{uuid}/messages"
        await timed(
            "for scale: POST /messages with fsync off",
            lambda: asgi_call(app, "POST", path, body),
            other.write_behind.flush,
        )
    return rows


def run(quick: bool, scratch: Path) -> Report:
    agents = (1, 8) if quick else AGENTS
    seconds, slices = (0.3, 1) if quick else (3.0, 5)
    raw = {
        "fsync": raw_appends_per_s(scratch, fsync=True, seconds=seconds),
        "nofsync": raw_appends_per_s(scratch, fsync=False, seconds=seconds),
    }
    results: dict[str, list[dict[str, Any]]] = {}
    for mode in ("always", "never"):
        with Service(scratch / f"fsync-{mode}" / "contexts", FSYNC=mode) as service:
            results[mode] = asyncio.run(measure_service(service, agents, seconds, slices))
    parts = asyncio.run(breakdown(scratch, 100 if quick else 2000))
    waits = work_after_waits(scratch, 100 if quick else 3000)
    return report(raw, results, seconds, slices, parts, waits)


def report(
    raw: dict[str, float],
    results: dict[str, list[dict[str, Any]]],
    seconds: float,
    slices: int,
    parts: list[tuple[str, float]],
    waits: dict[str, float],
) -> Report:
    columns = [
        "fsync",
        "case",
        "agents",
        "msg/s",
        "p50 ms",
        "p99 ms",
        "of raw",
        "of healthz",
        "server CPU ms/msg",
        "client CPU ms/msg",
    ]
    table = Table("appends over HTTP (one message per request)", columns)
    for mode, rows in results.items():
        limit = raw["fsync" if mode == "always" else "nofsync"]
        for row in rows:
            of_raw = "" if row["case"] == "GET /healthz" else f"{row['per_s'] / limit:.2%}"
            of_healthz = f"{row['of_healthz']:.0%}" if "of_healthz" in row else ""
            table.rows.append(
                [
                    mode,
                    row["case"],
                    row["agents"],
                    row["per_s"],
                    row["p50_ms"],
                    row["p99_ms"],
                    of_raw,
                    of_healthz,
                    row["server_cpu_ms_per_request"],
                    row["client_cpu_ms_per_request"],
                ]
            )
    limits = Table(
        "the machine's raw limits (same disk, same run)",
        ["loop", "appends/s"],
        [["os.write + os.fsync", round(raw["fsync"], 1)], ["os.write", round(raw["nofsync"], 1)]],
    )
    table.notes = [
        f"Each case runs {seconds} s in {slices} slices, after a warm-up each, the three cases",
        "of a concurrency taking turns. 'of raw': msg/s over the raw loop of the",
        "same fsync mode; 'of healthz': over GET /healthz at the same concurrency (the HTTP floor",
        "of this client + uvicorn on this machine). Group commit lets concurrent appends to one",
        "task share an fsync, so with fsync on they can pass the one-fsync-per-line raw loop.",
    ]
    where = Table(
        "where an append's CPU goes (in-process, one task, fsync on)",
        ["part", "CPU ms per call"],
        [list(row) for row in parts],
        [
            "The app driven over ASGI with no server or client in the process; process CPU, so the",
            "database's and the file writes' worker threads count.",
        ],
    )
    after = Table(
        "the same Python work after a wait (this machine, same run)",
        ["before the work", "CPU µs of the work"],
        [[name, us] for name, us in waits.items()],
        [
            "Thread CPU of 20 JSON round trips of the message (orjson and json), the waits taking",
            "turns. Work right after a wait in which the CPU idled can cost more than the same",
            "work with no wait before it: an append waits for its fsync, GET /healthz for nothing.",
        ],
    )
    data = {
        "raw_appends_per_s": raw,
        "cases": results,
        "breakdown_ms": dict(parts),
        "work_after_waits_us": waits,
    }
    return Report([limits, table, where, after], data)
