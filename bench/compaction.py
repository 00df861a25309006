"""Benchmark: what a condense costs besides its summariser, and what rebuilding current.jsonl costs.

Contexts of 100, 1,000 and 5,000 messages (a seeded mix of user turns, assistant notes, assistant
tool calls and their tool results, contents of 200 B..4 KiB) are filled through the HTTP API in
batches, into tasks whose window is the largest allowed (and CONDENSE_THRESHOLD=1), so nothing
compacts on its own. FSYNC=always, as in production. Each measurement gets a fresh task (a
compaction changes the context), repeated REPEATS times; the median is reported.

One service runs it all, its default backend (LLM_BACKEND=openai) an OpenAI-compatible server in
this process (a thread) that answers every chat completion at once with a fixed short summary.

* extractive: ``POST /tasks/{uuid}/compress {"strategy": "condense"}`` on tasks created with
  ``summary_backend: "extractive"`` (the embedded summariser, what LLM_BACKEND=extractive gives
  every task). No LLM call: its time is overhead (index the context, commit the marker and the
  summary, rewrite current.jsonl) plus the digest itself. Right after each such compress (the
  service idle, so both see the same load) the digest is timed again in this process on the same
  span read the same way (``visible_records`` of messages.jsonl into ``extractive_digest``), and
  subtracted from that compress's time.
* fake LLM: the same on tasks that keep the default backend, the fake. The seconds spent inside
  its handler (reading the request, writing the answer) are the "LLM" time; the rest of the wall
  time is the service's overhead: the requests it builds (a span larger than LLM_WINDOW goes in
  chunks, then a combine), and the same index/commit/rewrite as above.
* truncate: ``{"strategy": "truncate"}``: no summariser at all.

Then, in this process on each compacted task's directory (the service closed): the time of
``app.context.files.rebuild(ContextFiles(dir), fsync=True)`` next to a plain read of
messages.jsonl and a read that also parses every line (the floor of any rebuild).
"""

import math
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import median
from typing import Any, cast

import httpx
import orjson

from app.context.files import ContextFiles, rebuild, span_records
from app.storage.jsonl import append_bytes, iter_lines
from app.storage.layout import Layout
from app.summaries.digest import extractive_digest
from app.summaries.summarizer import EXTRACTIVE_MAX_CHARS
from bench.harness import Report, Service, Table, create_task, http_client, plain_read_s

SIZES = (100, 1_000, 5_000)
QUICK_SIZES = (20, 60)
REPEATS = 3
WINDOW = 100_000_000  # the largest context_length a task may have (app/tasks/schemas.py)
BATCH = 250  # messages per POST
SEED = 8
MIN_BYTES, MAX_BYTES = 200, 4096
# FSYNC=always is the default; said anyway, since it is what makes commits cost what they do.
SERVICE_ENV = {"FSYNC": "always", "CONDENSE_THRESHOLD": "1"}
MODES = ("extractive", "fake", "truncate")
# What each mode's tasks name as their summary backend at creation (fake: the default one).
SUMMARY_BACKEND: dict[str, dict[str, str]] = {
    "extractive": {"summary_backend": "extractive"},
    "fake": {},
    "truncate": {},
}
MB = 1e6
FAKE_SUMMARY = (
    "Context: the agent is fixing a failing test in src/pkg/module_3.py. Current work: edits "
    "to the parser. Pending: run the test suite again."
)

# --- the conversation ------------------------------------------------------------------------

_VOCABULARY = (
    "the value of self return def class import from if else for in while with as try except "
    "raise None True False result config parser module test assert error data path line file "
    "request response client server cache index token window summary context record batch"
)
_WORDS = tuple(_VOCABULARY.split())
_TOOLS = ("read_file", "run_command", "edit_file", "grep")


def _text_pool(rng: random.Random, size: int = 1 << 18) -> str:
    """Code-like lines with paths and the odd error line, to cut contents from."""
    lines: list[str] = []
    length = 0
    while length < size:
        roll = rng.random()
        if roll < 0.04:
            line = f"Error: {rng.choice(_WORDS)} failed in {_path(rng)} line {rng.randint(1, 900)}"
        elif roll < 0.12:
            line = f"    see {_path(rng)}"
        else:
            line = "    " * rng.randint(0, 3) + " ".join(rng.choices(_WORDS, k=rng.randint(3, 12)))
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


def _path(rng: random.Random) -> str:
    return f"src/pkg{rng.randint(0, 9)}/module_{rng.randint(0, 60)}.py"


class _Writer:
    """Seeded contents: sizes log-uniform in MIN_BYTES..MAX_BYTES, text cut from a pool."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pool = _text_pool(self.rng)

    def size(self) -> int:
        return int(math.exp(self.rng.uniform(math.log(MIN_BYTES), math.log(MAX_BYTES))))

    def text(self, size: int | None = None) -> str:
        size = size or self.size()
        start = self.rng.randrange(len(self.pool) - size)
        return self.pool[start : start + size]


def conversation(count: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``count`` OpenAI messages: a user task, then assistant notes, tool calls with their
    results and the odd user turn; a call's results always follow it."""
    writer = _Writer(seed)
    rng = writer.rng
    messages: list[dict[str, Any]] = [{"role": "user", "content": writer.text()}]
    while len(messages) < count:
        left = count - len(messages)
        roll = rng.random()
        if roll < 0.08:
            messages.append({"role": "user", "content": writer.text()})
        elif roll < 0.3 or left < 2:
            messages.append({"role": "assistant", "content": writer.text()})
        else:
            messages += _tool_turn(writer, len(messages), min(left - 1, rng.choice((1, 1, 2))))
    return messages


def _tool_turn(writer: _Writer, index: int, calls: int) -> list[dict[str, Any]]:
    rng = writer.rng
    tool_calls = []
    results = []
    for n in range(calls):
        name = rng.choice(_TOOLS)
        call_id = f"call_{index}_{n}"
        tool_calls.append(
            {
                "id": call_id,
                "type": "function",
                # JSON strings, as OpenAI sends them
                "function": {"name": name, "arguments": _arguments(writer, name)},
            }
        )
        results.append(
            {"role": "tool", "tool_call_id": call_id, "tool_name": name, "content": writer.text()}
        )
    note = writer.text(rng.randint(20, 200)) if rng.random() < 0.5 else None
    return [{"role": "assistant", "content": note, "tool_calls": tool_calls}, *results]


def _arguments(writer: _Writer, name: str) -> str:
    rng = writer.rng
    if name == "read_file":
        arguments = {"path": _path(rng)}
    elif name == "run_command":
        arguments = {"command": f"pytest {_path(rng)} -x -q"}
    elif name == "grep":
        arguments = {"pattern": rng.choice(_WORDS), "path": "src/"}
    else:
        half = writer.size() // 2  # an edit carries text both ways
        arguments = {"path": _path(rng), "old": writer.text(half), "new": writer.text(half)}
    return orjson.dumps(arguments).decode()


def fill(client: httpx.Client, task_uuid: str, messages: list[dict[str, Any]]) -> None:
    for start in range(0, len(messages), BATCH):
        batch = {"messages": messages[start : start + BATCH]}
        response = client.post(f"/tasks/{task_uuid}/messages", json=batch)
        response.raise_for_status()
        if response.json()["compaction_scheduled"]:
            raise RuntimeError("a compaction was scheduled while filling")


# --- the fake LLM ----------------------------------------------------------------------------

_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": FAKE_SUMMARY},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FakeHandler)
        self.lock = threading.Lock()
        self.seconds: list[float] = []
        self.request_bytes = 0

    def take(self) -> tuple[list[float], int]:
        """The handler times and request bytes since the last take."""
        with self.lock:
            taken = (self.seconds, self.request_bytes)
            self.seconds, self.request_bytes = [], 0
        return taken


class _FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server

    def do_POST(self) -> None:
        started = time.perf_counter()
        size = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(size)  # the whole request, as a server must
        server = cast(_FakeServer, self.server)
        # Counted before the answer goes (a few hundred bytes): once it has, the service may
        # finish the compress before a later count would land.
        with server.lock:
            server.seconds.append(time.perf_counter() - started)
            server.request_bytes += size
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(_ANSWER)))
        self.end_headers()
        self.wfile.write(_ANSWER)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeLLM:
    """An OpenAI-compatible chat server on a free loopback port, in a thread."""

    def __init__(self) -> None:
        self.server = _FakeServer()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeLLM":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the measurements ------------------------------------------------------------------------


@dataclass
class Compression:
    """One compress call: its wall time, and the fake LLM's share of it."""

    mode: str
    task_uuid: str
    wall_s: float
    kind: str
    hidden: int
    llm_s: float = 0.0
    llm_calls: int = 0
    llm_request_bytes: int = 0
    digest_s: float = 0.0  # extractive: the digest of the same span, timed in this process


@dataclass
class SizeCase:
    size: int
    tasks: dict[str, list[str]] = field(default_factory=dict)
    compressions: list[Compression] = field(default_factory=list)
    fill_s: float = 0.0


def compress(client: httpx.Client, task_uuid: str, mode: str, fake: FakeLLM) -> Compression:
    strategy = "truncate" if mode == "truncate" else "condense"
    fake.server.take()  # nothing of an earlier call counts
    started = time.perf_counter()
    response = client.post(f"/tasks/{task_uuid}/compress", json={"strategy": strategy})
    wall = time.perf_counter() - started
    response.raise_for_status()
    outcome = response.json()
    expected = "truncation" if mode == "truncate" else "condense"
    if outcome["kind"] != expected:
        raise RuntimeError(f"{mode} on {task_uuid}: {outcome}")
    result = Compression(mode, task_uuid, wall, outcome["kind"], outcome["hidden_messages"])
    seconds, result.llm_request_bytes = fake.server.take()
    result.llm_s, result.llm_calls = sum(seconds), len(seconds)
    if (mode == "fake") != bool(seconds):  # the task's summariser is not the one meant
        raise RuntimeError(f"{mode} on {task_uuid}: {len(seconds)} LLM calls")
    return result


def prepare(client: httpx.Client, sizes: tuple[int, ...], repeats: int) -> list[SizeCase]:
    """A filled task per size, mode and repeat; each names its summariser at creation."""
    cases = []
    for size in sizes:
        messages = conversation(size)
        case = SizeCase(size)
        started = time.perf_counter()
        for mode in MODES:
            case.tasks[mode] = []
            for _ in range(repeats):
                task_uuid = create_task(client, WINDOW, **SUMMARY_BACKEND[mode])
                fill(client, task_uuid, messages)
                case.tasks[mode].append(task_uuid)
        case.fill_s = time.perf_counter() - started
        cases.append(case)
    return cases


def measure(
    context_dir: Path, fake: FakeLLM, sizes: tuple[int, ...], repeats: int
) -> tuple[list[SizeCase], float]:
    """The cases, measured, and how long the service took to be ready."""
    # One service whose default backend is the fake; the extractive tasks chose "extractive"
    # at creation. Either way a condense takes its usual path (the task's choice, read from its
    # metadata.json, else the default backend).
    layout = Layout(context_dir)
    llm_env = {"LLM_BACKEND": "openai", "LLM_BASE_URL": fake.base_url, "LLM_MODEL": "fake"}
    with (
        Service(context_dir, **SERVICE_ENV, **llm_env) as service,
        http_client(service) as client,
    ):
        cases = prepare(client, sizes, repeats)
        for case in cases:
            for i in range(repeats):  # interleaved, so drifting noise spreads over the modes
                for mode in MODES:
                    task_uuid = case.tasks[mode][i]
                    done = compress(client, task_uuid, mode, fake)
                    if mode == "extractive":
                        done.digest_s = timed_digest(layout.task_dir("running", task_uuid))
                    case.compressions.append(done)
    return cases, service.ready_after_s


# --- in this process, on the files ---------------------------------------------------------


@dataclass
class FileTimes:
    """One compacted task's files: sizes and in-process timings."""

    messages_bytes: int  # before the compaction's marker
    file_bytes: int  # messages.jsonl now
    rebuild_s: float
    read_s: float
    parse_s: float


def _end_before_marker(path: Path) -> int:
    """Where messages.jsonl ended before the compaction appended its marker (its last line)."""
    data = path.read_bytes()
    return data.rfind(b"\n", 0, len(data) - 1) + 1


def fsync_latency(directory: Path, count: int = 20) -> float:
    """The median time to append a line to a file and fsync it, as the service does: the unit
    of a commit's cost (a condense fsyncs summaries.jsonl, messages.jsonl, the new
    current.jsonl and its directory, and the database its journal)."""
    path = directory / "fsync-probe.jsonl"
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        append_bytes(path, b'{"probe": true}\n' * 10, fsync=True)
        seconds.append(time.perf_counter() - started)
    path.unlink()
    return median(seconds)


def _timed_parse(path: Path) -> float:
    started = time.perf_counter()
    for _, line in iter_lines(path):
        orjson.loads(line)
    return time.perf_counter() - started


def _timed_rebuild(directory: Path) -> float:
    started = time.perf_counter()
    rebuild(ContextFiles(directory), fsync=True)
    return time.perf_counter() - started


def timed_digest(directory: Path) -> float:
    """The extractive digest of the span the service condensed, read as the service reads it
    (the file as it was before the condense's marker)."""
    end = _end_before_marker(directory / "messages.jsonl")
    lines = (directory / "summaries.jsonl").read_bytes().splitlines()
    record = orjson.loads(lines[-1])
    with open(directory / "messages.jsonl", "rb") as f:
        started = time.perf_counter()
        spanned = span_records(f, end, record["start_seq"], record["end_seq"])
        extractive_digest(spanned, max_chars=EXTRACTIVE_MAX_CHARS)
        return time.perf_counter() - started


def file_times(directory: Path) -> FileTimes:
    messages = directory / "messages.jsonl"
    end = _end_before_marker(messages)
    plain_read_s(messages)  # warm the page cache: every figure below reads from memory
    return FileTimes(
        messages_bytes=end,
        file_bytes=messages.stat().st_size,
        read_s=plain_read_s(messages),
        parse_s=_timed_parse(messages),
        rebuild_s=_timed_rebuild(directory),
    )


# --- the report -----------------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def condense_row(case: SizeCase, files: dict[str, FileTimes]) -> dict[str, Any]:
    def of(mode: str) -> list[Compression]:
        return [c for c in case.compressions if c.mode == mode]

    fake = of("fake")
    extractive = of("extractive")
    return {
        "messages": case.size,
        "context_mib": round(median([t.messages_bytes for t in files.values()]) / 2**20, 3),
        "extractive_ms": _ms(median([c.wall_s for c in extractive])),
        "digest_ms": _ms(median([c.digest_s for c in extractive])),
        "extractive_overhead_ms": _ms(median([c.wall_s - c.digest_s for c in extractive])),
        "fake_total_ms": _ms(median([c.wall_s for c in fake])),
        "inside_llm_ms": _ms(median([c.llm_s for c in fake])),
        "fake_overhead_ms": _ms(median([c.wall_s - c.llm_s for c in fake])),
        "llm_calls": int(median([c.llm_calls for c in fake])),
        "llm_request_mib": round(median([c.llm_request_bytes for c in fake]) / 2**20, 3),
        "truncate_ms": _ms(median([c.wall_s for c in of("truncate")])),
        "hidden_messages": int(median([c.hidden for c in extractive])),
    }


def rebuild_row(case: SizeCase, files: dict[str, FileTimes]) -> dict[str, Any]:
    times = list(files.values())
    size = median([t.file_bytes for t in times])
    rebuild_rate = median([t.file_bytes / t.rebuild_s / MB for t in times])
    read_rate = median([t.file_bytes / t.read_s / MB for t in times])
    return {
        "messages": case.size,
        "messages_mib": round(size / 2**20, 3),
        "rebuild_ms": _ms(median([t.rebuild_s for t in times])),
        "rebuild_mb_s": round(rebuild_rate, 1),
        "parse_mb_s": round(median([t.file_bytes / t.parse_s / MB for t in times]), 1),
        "read_mb_s": round(read_rate, 1),
        "read_over_rebuild": round(read_rate / rebuild_rate, 1),
    }


CONDENSE_COLUMNS = {
    "messages": "messages",
    "context_mib": "context MiB",
    "extractive_ms": "extractive ms",
    "digest_ms": "digest ms",
    "extractive_overhead_ms": "extractive overhead ms",
    "fake_total_ms": "fake-LLM total ms",
    "llm_calls": "LLM calls",
    "inside_llm_ms": "inside LLM ms",
    "fake_overhead_ms": "overhead ms",
    "truncate_ms": "truncate ms",
}
REBUILD_COLUMNS = {
    "messages": "messages",
    "messages_mib": "messages.jsonl MiB",
    "rebuild_ms": "rebuild ms",
    "rebuild_mb_s": "rebuild MB/s",
    "parse_mb_s": "read+parse MB/s",
    "read_mb_s": "plain read MB/s",
    "read_over_rebuild": "read/rebuild",
}


def _table(title: str, columns: dict[str, str], rows: list[dict[str, Any]]) -> Table:
    return Table(title, list(columns.values()), [[r[k] for k in columns] for r in rows])


def condense_table(rows: list[dict[str, Any]], fsync_ms: float) -> Table:
    table = _table(
        "condense overhead (POST /compress, median of fresh tasks)", CONDENSE_COLUMNS, rows
    )
    table.notes = [
        "extractive ms is the whole compress with the extractive summariser; digest ms is that "
        "digest alone (read, parse and summarise the same span, timed in-process right after), "
        "and extractive overhead ms the difference (median of the per-task differences): small "
        "beside the digest, so on a busy machine it is within noise and can come out negative.",
        "fake-LLM total ms is a compress against an OpenAI-compatible server that answers at "
        "once; inside LLM ms is the time spent in its handler, overhead ms the rest (re-counting "
        "the span's tokens to chunk it to LLM_WINDOW, building and sending the requests, "
        "indexing, commit, rewrite of current.jsonl).",
        "truncate ms is a truncation: index, marker, rewrite, no summariser.",
        f"For scale: one append and fsync on this disk takes {fsync_ms} ms (median); a condense "
        "commits with four of them and a database commit.",
    ]
    if len(rows) >= 2:  # the same cost per message at both sizes: linear
        per = [(r["messages"], r["fake_overhead_ms"] / r["messages"]) for r in rows[-2:]]
        table.notes.append(
            "fake-LLM overhead per message: "
            + ", ".join(f"{ms:.2f} ms at {n:,} messages" for n, ms in per)
            + "."
        )
    return table


def rebuild_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("rebuild current.jsonl (in-process, fsync)", REBUILD_COLUMNS, rows)
    table.notes = [
        "rebuild is app.context.files.rebuild on a compacted task (two passes over "
        "messages.jsonl, current.jsonl written and fsynced); MB/s are messages.jsonl bytes per "
        "second; read+parse is one pass with orjson.loads on every line, the floor of a rebuild; "
        "read/rebuild is how many times faster a plain read is (warm page cache).",
        "Small files are bound by the two fsyncs (file and directory), not by the bytes.",
    ]
    return table


def run(quick: bool, scratch: Path) -> Report:
    sizes = QUICK_SIZES if quick else SIZES
    repeats = 1 if quick else REPEATS
    context_dir = scratch / "contexts"
    with FakeLLM() as fake:
        cases, ready_s = measure(context_dir, fake, sizes, repeats)
    # The service is closed: the files are this process's alone.
    started = time.perf_counter()
    layout = Layout(context_dir)
    condense_rows, rebuild_rows = [], []
    for case in cases:
        uuids = [u for mode in MODES for u in case.tasks[mode]]
        files = {u: file_times(layout.task_dir("running", u)) for u in uuids}
        condense_rows.append(condense_row(case, files))
        rebuild_rows.append(rebuild_row(case, files))
    files_s = time.perf_counter() - started
    fsync_ms = _ms(fsync_latency(scratch))
    data = {
        "sizes": list(sizes),
        "repeats": repeats,
        "batch": BATCH,
        "window": WINDOW,
        "service_env": SERVICE_ENV,
        "service_ready_s": round(ready_s, 2),
        "fsync_ms": fsync_ms,
        "in_process_s": round(files_s, 2),
        "condense": condense_rows,
        "rebuild": rebuild_rows,
        "fill": [
            {"messages": case.size, "tasks": len(MODES) * repeats, "seconds": round(case.fill_s, 2)}
            for case in cases
        ],
        "compressions": [
            c.__dict__ | {"size": case.size} for case in cases for c in case.compressions
        ],
    }
    return Report([condense_table(condense_rows, fsync_ms), rebuild_table(rebuild_rows)], data)
