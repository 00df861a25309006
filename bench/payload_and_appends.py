"""Benchmark: payload streaming memory and speed, and append throughput with group commit.

Runs a real uvicorn process and drives it over loopback from this process. Prints a table and
writes bench/results/payload_and_appends.json. Ratios within one run matter more than absolute
numbers on a noisy machine.

    .venv/bin/python -m bench.payload_and_appends [--sizes-mb 0.01 1 10 100]
"""

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.formats import FORMATS
from bench.machine import run_facts
from bench.server import Service

RESULTS = Path(__file__).parent / "results" / "payload_and_appends.json"
MESSAGE_BYTES = 256 * 1024


def create_task(client: httpx.Client, window: int) -> str:
    body = {
        "task_key": {
            "task_source": "bench",
            "owner": "o",
            "repo": "r",
            "task_type": "issue",
            "task_id": str(uuid.uuid4()),
        },
        "model": "gpt-4o",
        "context_length": window,
        "max_output_tokens": 4096,
        "system_prompt": "You are a benchmark.",
    }
    response = client.post("/tasks", json=body)
    response.raise_for_status()
    task_uuid: str = response.json()["uuid"]
    return task_uuid


def fill(client: httpx.Client, task_uuid: str, size: int) -> None:
    text = ("lorem ipsum dolor sit amet " * (MESSAGE_BYTES // 27 + 1))[:MESSAGE_BYTES]
    written = 0
    while written < size:
        chunk = text[: min(MESSAGE_BYTES, size - written)]
        batch = [{"role": "user", "content": chunk}, {"role": "assistant", "content": "ok"}]
        client.post(f"/tasks/{task_uuid}/messages", json={"messages": batch}).raise_for_status()
        written += len(chunk)


class PeakRSS:
    """Samples a process's RSS in a thread while a block runs."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.002)

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def naive_peak_rss(current: Path) -> int:
    """The seeds' 'before': load the context as a list and json.dumps it, in a fresh process."""
    code = (
        "import json,sys,resource\n"
        "msgs=[json.loads(l) for l in open(sys.argv[1])]\n"
        "body=json.dumps({'model':'gpt-4o','messages':msgs})\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss*1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(current)], capture_output=True, text=True)
    return int(out.stdout.strip())


def baseline_rss() -> int:
    code = "import json,resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss*1024)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout.strip())


def payload_rows(service: Service, context_dir: Path, sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    with httpx.Client(base_url=service.url, timeout=600) as client:
        for size in sizes:
            task_uuid = create_task(client, window=max(200_000, size))
            fill(client, task_uuid, size)
            current = context_dir / "running" / task_uuid / "current.jsonl"
            naive_growth = max(0, naive_peak_rss(current) - baseline_rss())
            for payload_format in FORMATS:
                for _ in range(2):  # warm-up, then measured
                    before = service.rss()
                    with PeakRSS(service.process.pid) as peak:
                        started = time.perf_counter()
                        received = 0
                        with client.stream(
                            "GET", f"/tasks/{task_uuid}/request", params={"format": payload_format}
                        ) as response:
                            response.raise_for_status()
                            for chunk in response.iter_bytes():
                                received += len(chunk)
                        seconds = time.perf_counter() - started
                started = time.perf_counter()
                with open(current, "rb") as f:
                    while f.read(1 << 20):
                        pass
                read_seconds = time.perf_counter() - started
                rows.append(
                    {
                        "format": payload_format,
                        "context_bytes": current.stat().st_size,
                        "payload_bytes": received,
                        "seconds": round(seconds, 4),
                        "mb_per_s": round(received / seconds / 1e6, 1),
                        "plain_read_mb_per_s": round(received / max(read_seconds, 1e-9) / 1e6, 1),
                        "rss_before": before,
                        "rss_growth": max(0, peak.peak - before),
                        "naive_peak_rss_growth": naive_growth,
                    }
                )
    return rows


async def append_rows(service: Service, agents: list[int], per_agent: int) -> list[dict[str, Any]]:
    rows = []
    async with httpx.AsyncClient(base_url=service.url, timeout=120) as client:
        for count in agents:
            for shared in (True, False):
                with httpx.Client(base_url=service.url) as sync_client:
                    tasks = [create_task(sync_client, 1_000_000)]
                    if not shared:
                        tasks += [create_task(sync_client, 1_000_000) for _ in range(count - 1)]
                latencies: list[float] = []

                async def agent(index: int, task_uuid: str, latencies: list[float]) -> None:
                    for n in range(per_agent):
                        started = time.perf_counter()
                        response = await client.post(
                            f"/tasks/{task_uuid}/messages",
                            json={"role": "user", "content": f"agent {index} message {n} " * 8},
                        )
                        response.raise_for_status()
                        latencies.append(time.perf_counter() - started)

                started = time.perf_counter()
                await asyncio.gather(
                    *(agent(i, tasks[i % len(tasks)], latencies) for i in range(count))
                )
                seconds = time.perf_counter() - started
                latencies.sort()
                rows.append(
                    {
                        "agents": count,
                        "tasks": "one" if shared else "own",
                        "messages_per_s": round(len(latencies) / seconds, 1),
                        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
                        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
                    }
                )
    return rows


def raw_fsync_appends_per_s(directory: Path, count: int = 2000) -> float:
    import os

    path = directory / "raw.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    started = time.perf_counter()
    for _ in range(count):
        os.write(fd, b'{"seq": 1, "role": "user", "content": "raw"}\n')
        os.fsync(fd)
    seconds = time.perf_counter() - started
    os.close(fd)
    return round(count / seconds, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[0.01, 1, 10, 100])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--per-agent", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent.parent) as tmp:
        context_dir = Path(tmp) / "contexts"
        with Service(context_dir) as service:
            payloads = payload_rows(service, context_dir, [int(s * 1e6) for s in args.sizes_mb])
            appends = asyncio.run(append_rows(service, args.agents, args.per_agent))
        raw = raw_fsync_appends_per_s(Path(tmp))
    results = {
        **run_facts(),
        "payload": payloads,
        "appends": appends,
        "raw_append_fsync_per_s": raw,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"{'format':>9} {'context':>12} {'payload MB/s':>13} {'plain read MB/s':>16} "
        f"{'RSS growth':>11} {'naive RSS growth':>17}"
    )
    for row in payloads:
        print(
            f"{row['format']:>9} {row['context_bytes']:>12,} {row['mb_per_s']:>13} "
            f"{row['plain_read_mb_per_s']:>16} {row['rss_growth']:>11,} "
            f"{row['naive_peak_rss_growth']:>17,}"
        )
    print(f"\n{'agents':>6} {'tasks':>5} {'msg/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for row in appends:
        print(
            f"{row['agents']:>6} {row['tasks']:>5} {row['messages_per_s']:>8} "
            f"{row['p50_ms']:>8} {row['p99_ms']:>8}"
        )
    print(f"\nraw append+fsync loop on the same disk: {raw}/s")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
