"""What every benchmark shares: the service as a real uvicorn process, RSS sampling, task
bodies, percentiles, and the table a benchmark prints and the results file it writes.

A benchmark module exposes ``run(quick: bool, scratch: Path) -> Report``; ``python -m bench``
runs them, prints their tables and writes ``bench/results/<name>.json``.
"""

import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).parent / "results"
READY_TIMEOUT_S = 600.0  # a start with many tasks on disk reconciles each of them first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Service:
    """``context-service serve`` as it runs in production (access log included) on a free
    loopback port, CONTEXT_DIR ``context_dir`` with its SQLite database, settings from ``env``
    (upper-case names). Its log goes to a file beside ``context_dir``."""

    def __init__(self, context_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = context_dir.parent / f"service-{self.port}.log"
        context_dir.parent.mkdir(parents=True, exist_ok=True)
        settings = {"CONTEXT_DIR": str(context_dir), **env}
        environment = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | settings
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    *(str(Path(sys.executable).parent / "context-service"), "serve"),
                    *("--host", "127.0.0.1", "--port", str(self.port)),
                ],
                cwd=REPO,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        self.ready_after_s = time.perf_counter() - started

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"the service was not ready in {READY_TIMEOUT_S}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def processes(self) -> list[psutil.Process]:
        """The server and any processes it started."""
        root = psutil.Process(self.process.pid)
        return [root, *root.children(recursive=True)]

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in self.processes())

    def cpu_seconds(self) -> float:
        """CPU time the server has used so far."""
        return cpu_seconds(psutil.Process(self.process.pid))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Service":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class PeakRSS:
    """The highest RSS the service's processes reach while the block runs, from the kernel's
    own high-water mark (VmHWM in /proc/PID/status, reset on entry by writing 5 to
    /proc/PID/clear_refs; Linux): exact, and free. (Sampling from a thread of this process
    missed short peaks and took a third of a core and the GIL from the load generator.)"""

    def __init__(self, service: Service) -> None:
        self.pids = [p.pid for p in service.processes()]
        self.peak = 0

    def __enter__(self) -> "PeakRSS":
        for pid in self.pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        return self

    def __exit__(self, *_: object) -> None:
        self.peak = sum(_status_kib(pid, "VmHWM") for pid in self.pids) * 1024


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def cpu_seconds(process: psutil.Process) -> float:
    """CPU time (user + system) a process has used so far."""
    times = process.cpu_times()
    return float(times.user + times.system)


def plain_read_s(path: Path) -> float:
    """Seconds to read ``path`` in 1 MiB chunks, doing nothing with them: the disk's (or page
    cache's) limit for anything that reads the file."""
    started = time.perf_counter()
    with path.open("rb") as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - started


# Idle connections are dropped after 2 s, before uvicorn's keep-alive (5 s) ends them: a
# connection reused just as the server closes it fails the request (httpx.ReadError).
KEEPALIVE_S = 2.0


def http_client(service: Service, timeout: float = 120) -> httpx.Client:
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_S)
    return httpx.Client(base_url=service.url, timeout=timeout, limits=limits)


def async_http_client(
    service: Service, connections: int, timeout: float = 120
) -> httpx.AsyncClient:
    """A client for ``connections`` concurrent agents."""
    limits = httpx.Limits(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=KEEPALIVE_S,
    )
    return httpx.AsyncClient(base_url=service.url, timeout=timeout, limits=limits)


def task_body(window: int, *, max_output_tokens: int = 4096, **fields: Any) -> dict[str, Any]:
    return {
        "task_key": {
            "task_source": "bench",
            "owner": "bench",
            "repo": "bench",
            "task_type": "issue",
            "task_id": str(uuid.uuid4()),
        },
        "model": "gpt-4o",
        "context_length": window,
        "max_output_tokens": max_output_tokens,
        "system_prompt": "You are a coding agent under a benchmark.",
        **fields,
    }


def create_task(client: httpx.Client, window: int, **fields: Any) -> str:
    response = client.post("/tasks", json=task_body(window, **fields))
    response.raise_for_status()
    task_uuid: str = response.json()["uuid"]
    return task_uuid


@dataclass(frozen=True)
class WarmTimes:
    """A GET repeated on a warm cache: its median and worst time, and the last answer."""

    p50_ms: float
    max_ms: float
    last: httpx.Response


def warm_gets(client: httpx.Client, path: str, runs: int, **params: Any) -> WarmTimes:
    """GET ``path`` ``runs`` + 1 times and time the last ``runs`` (the first warms the page
    cache); every answer must succeed."""
    times = []
    response = None
    for _ in range(runs + 1):
        start = time.perf_counter()
        response = client.get(path, params=params or None)
        times.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    assert response is not None
    times = times[1:]
    return WarmTimes(round(statistics.median(times), 1), round(max(times), 1), response)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def mib(size: float) -> float:
    return round(size / 2**20, 1)


def size_label(size: int) -> str:
    """A byte count for a table: "10 KB", "1.0 MB", "95.4 MB" (powers of 1,000)."""
    return f"{size / 1e3:,.0f} KB" if size < 1e6 else f"{size / 1e6:,.1f} MB"


@dataclass
class Table:
    """What a benchmark prints, and what bench/README.md shows."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        cells = [self.columns, *([_cell(v) for v in row] for row in self.rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [self.title, "-" * len(self.title)]
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
        return "\n".join(lines + self.notes)

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join("---:" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines + [""] + [f"{note}  " for note in self.notes])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass
class Report:
    """A benchmark's outcome: its tables, and the numbers behind them for the results file."""

    tables: list[Table]
    data: dict[str, Any]


def run_facts() -> dict[str, Any]:
    """The machine and the moment, recorded with every result."""
    return {
        "machine": {
            "cpus": psutil.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
