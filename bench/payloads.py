"""Payloads: GET /request latency, throughput and server RSS for contexts of 10 KB, 1 MB, 10 MB
and 100 MB, in each format; beside them, in the same run, a plain read of the same
current.jsonl (the disk and page cache's limit) and the original design's "before" picture:
the context loaded as a Python list and json.dumps'd in a fresh process (that design expected
95-99% less memory for streaming than that).

Contexts are filled over HTTP with 256 KB user messages and short answers (a window big enough
that nothing is compacted). Each GET is made twice, the second measured; RSS is the server's
peak during the request over its RSS before it.

The first byte of an agent's usual payload (10 and 400 messages, the latter ~120k tokens) is
set against GET /healthz on the same connection, the two alternated, medians of many.
"""

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from asgi_lifespan import LifespanManager

from app.config import Settings
from app.formats import FORMATS
from app.main import create_app
from bench.appends import asgi_call
from bench.harness import (
    PeakRSS,
    Report,
    Service,
    Table,
    create_task,
    http_client,
    mib,
    plain_read_s,
    size_label,
    task_body,
)

SIZES = (10_000, 1_000_000, 10_000_000, 100_000_000)
MESSAGE_BYTES = 256 * 1024
MAX_WINDOW = 100_000_000  # tokens: big enough for 100 MB of text, so nothing is compacted

NAIVE = """
import json, resource, sys
messages = [json.loads(line) for line in open(sys.argv[1])]
body = json.dumps({"model": "gpt-4o", "messages": messages})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""
BARE = "import json, resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"


def fill(client: httpx.Client, task_uuid: str, size: int) -> None:
    text = ("lorem ipsum dolor sit amet " * (MESSAGE_BYTES // 27 + 1))[:MESSAGE_BYTES]
    written = 0
    while written < size:
        batch = []
        for _ in range(8):  # 2 MB per request
            chunk = text[: min(MESSAGE_BYTES, size - written)]
            if not chunk:
                break
            batch += [{"role": "user", "content": chunk}, {"role": "assistant", "content": "ok"}]
            written += len(chunk)
        client.post(f"/tasks/{task_uuid}/messages", json={"messages": batch}).raise_for_status()


def peak_rss_of(code: str, *args: str) -> int:
    """The peak RSS of a fresh Python running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def get_payload(service: Service, client: httpx.Client, task_uuid: str, fmt: str) -> dict[str, Any]:
    """Two GETs: the second's times are reported (the first warms the page cache and the
    server's code paths); the RSS growth is the larger of the two (the first pays for any
    memory the server keeps afterwards)."""
    growth = 0
    for _ in range(2):
        before = service.rss()
        with PeakRSS(service) as peak:
            started = time.perf_counter()
            first_byte = 0.0
            received = 0
            path = f"/tasks/{task_uuid}/request"
            with client.stream("GET", path, params={"format": fmt}) as response:
                response.raise_for_status()
                for chunk in response.iter_bytes():
                    first_byte = first_byte or time.perf_counter() - started
                    received += len(chunk)
            seconds = time.perf_counter() - started
        growth = max(growth, peak.peak - before)
    return {
        "format": fmt,
        "payload_bytes": received,
        "seconds": seconds,
        "first_byte_s": first_byte,
        "rss_before": before,
        "rss_growth": growth,
    }


# Server CPU of a payload, in-process, at windows up to 128k tokens: ~300 tokens a message.
CPU_MESSAGES = (10, 100, 400)
CPU_TEXT = "the parser test fails after the refactor of the tokenizer; " * 20


def text_batches(count: int, size: int = 50) -> list[list[dict[str, str]]]:
    """``count`` ~300-token messages, user and assistant in turn, in appends of ``size``."""
    messages = [
        {"role": ("user", "assistant")[i % 2], "content": f"{i} {CPU_TEXT}"} for i in range(count)
    ]
    return [messages[start : start + size] for start in range(0, count, size)]


async def payload_cpu(scratch: Path, requests: int) -> list[tuple[int, int, float]]:
    """(messages, tokens, CPU ms per GET /request) of contexts in one task each, the app driven
    over ASGI with no server or client in the process; first GET /healthz's (0 messages)."""
    settings = Settings(context_dir=scratch / "cpu" / "contexts")
    rows = []
    async with LifespanManager(create_app(settings)) as started:
        app = started.app
        cases: list[tuple[str, int, int]] = [("/healthz", 0, 0)]
        for count in CPU_MESSAGES:
            created = await asgi_call(app, "POST", "/tasks", orjson.dumps(task_body(200_000)))
            task_uuid = orjson.loads(created)["uuid"]
            for batch in text_batches(count):
                await asgi_call(
                    app, "POST", f"/tasks/{task_uuid}/messages", orjson.dumps({"messages": batch})
                )
            task = orjson.loads(await asgi_call(app, "GET", f"/tasks/{task_uuid}"))
            cases.append((f"/tasks/{task_uuid}/request", count, task["context"]["tokens"]))
        for path, count, tokens in cases:
            for _ in range(requests // 10):  # warm
                await asgi_call(app, "GET", path)
            started_cpu = time.process_time()
            for _ in range(requests):
                await asgi_call(app, "GET", path)
            rows.append((count, tokens, (time.process_time() - started_cpu) / requests * 1000))
    return rows


# The first byte against GET /healthz: contexts of these many ~300-token messages.
FIRST_BYTE_MESSAGES = (10, 400)
FIRST_BYTE_FORMATS = ("openai", "anthropic")


def first_byte_against_healthz(
    client: httpx.Client, task_uuid: str, fmt: str, requests: int
) -> tuple[float, float]:
    """Median seconds of GET /healthz and of GET /request's first byte, alternated."""
    healthz: list[float] = []
    first: list[float] = []
    for _ in range(requests):
        started = time.perf_counter()
        client.get("/healthz").raise_for_status()
        healthz.append(time.perf_counter() - started)
        started = time.perf_counter()
        with client.stream("GET", f"/tasks/{task_uuid}/request", params={"format": fmt}) as answer:
            answer.raise_for_status()
            chunks = answer.iter_raw()
            next(chunks)
            first.append(time.perf_counter() - started)
            for _ in chunks:
                pass
    return statistics.median(healthz), statistics.median(first)


def first_byte_table(client: httpx.Client, requests: int) -> Table:
    table = Table(
        "GET /request: the first byte against GET /healthz (uvicorn, medians)",
        ["messages", "context tokens", "format", "GET /healthz ms", "first byte ms", "ratio"],
    )
    for count in FIRST_BYTE_MESSAGES:
        task_uuid = create_task(client, 200_000)
        for batch in text_batches(count):
            client.post(f"/tasks/{task_uuid}/messages", json={"messages": batch}).raise_for_status()
        tokens = client.get(f"/tasks/{task_uuid}").json()["context"]["tokens"]
        for fmt in FIRST_BYTE_FORMATS:
            first_byte_against_healthz(client, task_uuid, fmt, requests // 10)  # warm
            healthz, first = first_byte_against_healthz(client, task_uuid, fmt, requests)
            table.rows.append(
                [
                    count,
                    tokens,
                    fmt,
                    round(healthz * 1000, 2),
                    round(first * 1000, 2),
                    f"{first / healthz:.2f}x",
                ]
            )
    table.notes = [
        f"{requests} of each, alternated on one keep-alive connection; the same client and",
        "server. The target: the first byte within 2x of GET /healthz.",
    ]
    return table


def run(quick: bool, scratch: Path) -> Report:
    cpu = asyncio.run(payload_cpu(scratch, 30 if quick else 300))
    sizes = SIZES[:2] if quick else SIZES
    context_dir = scratch / "contexts"
    bare = peak_rss_of(BARE)
    rows: list[dict[str, Any]] = []
    with Service(context_dir) as service, http_client(service, 600) as client:
        first_byte = first_byte_table(client, 50 if quick else 500)
        for size in sizes:
            task_uuid = create_task(client, MAX_WINDOW, max_output_tokens=4096)
            fill(client, task_uuid, size)
            current = context_dir / "running" / task_uuid / "current.jsonl"
            read_s = min(plain_read_s(current) for _ in range(3))
            naive = peak_rss_of(NAIVE, str(current)) - bare
            for fmt in FORMATS:
                row = get_payload(service, client, task_uuid, fmt)
                rows.append(
                    {
                        **row,
                        "context_bytes": current.stat().st_size,
                        "plain_read_s": read_s,
                        "naive_rss_growth": naive,
                    }
                )
    return report(rows, cpu, first_byte)


def report(
    rows: list[dict[str, Any]], cpu: list[tuple[int, int, float]], first_byte: Table
) -> Report:
    table = Table(
        "GET /request: latency, throughput and server memory by context size",
        [
            "format",
            "context",
            "payload",
            "ms",
            "first byte ms",
            "MB/s",
            "plain read MB/s",
            "of plain read",
            "RSS growth MiB",
            "naive RSS growth MiB",
            "memory saved",
        ],
    )
    for row in rows:
        mb_s = row["payload_bytes"] / row["seconds"] / 1e6
        read_mb_s = row["context_bytes"] / row["plain_read_s"] / 1e6
        naive = row["naive_rss_growth"]
        saved = f"{1 - row['rss_growth'] / naive:.1%}" if naive > 2**20 else "n/a"
        table.rows.append(
            [
                row["format"],
                size_label(row["context_bytes"]),
                size_label(row["payload_bytes"]),
                round(row["seconds"] * 1000, 1),
                round(row["first_byte_s"] * 1000, 1),
                round(mb_s, 1),
                round(read_mb_s, 1),
                f"{mb_s / read_mb_s:.1%}",
                mib(row["rss_growth"]),
                mib(naive),
                saved,
            ]
        )
    table.notes = [
        "'of plain read': payload MB/s over reading current.jsonl from the page cache in 1 MiB",
        "chunks: the service also checks every line, renders the format and sends it over HTTP.",
        "'naive': a fresh python loads current.jsonl as a list and json.dumps the request (peak",
        "RSS over a bare interpreter's); 'memory saved' = 1 - server RSS growth / naive growth",
        "(n/a where the naive growth is under 1 MiB).",
    ]
    cpu_table = Table(
        "GET /request: the server's CPU per payload (in-process, OpenAI format)",
        ["request", "messages", "context tokens", "CPU ms"],
        [
            ["GET /healthz" if not count else "GET /request", count, tokens, round(ms, 3)]
            for count, tokens, ms in cpu
        ],
        [
            "The app driven over ASGI with no server or client in the process; process CPU, so the",
            "worker threads count. Windows of 200k tokens: none of these contexts compacts.",
        ],
    )
    return Report(
        [cpu_table, first_byte, table],
        {"rows": rows, "cpu_ms": cpu, "first_byte": first_byte.rows},
    )
