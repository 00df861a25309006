"""Corpus replay: every trajectory of ../shared/corpus/trajectories/ replayed as concurrent
agents against one real service, at context_length 8,000, 32,000 and 128,000.

For each window a fresh service (its own CONTEXT_DIR; SQLite, extractive summariser,
FSYNC=always) serves one agent per trajectory, all at once over one httpx client. An agent
creates its task (the trajectory's leading system message as the system prompt), then appends
the messages one at a time, in order, as the agent produced them; before an assistant message
it asks GET /tasks/{uuid}/request, as a real agent does before calling its LLM (before one in
PAYLOAD_EVERY: see there why), and checks the answer is 200 and within the budget
(X-Context-Tokens <= X-Context-Budget). Then it completes the task. Anything but 201 / 200 is
counted by status, never fatal.

Measured: the wall time until the last agent has completed, append and payload latencies
(queueing included: 37 agents share two cores with the load generator), the compactions the
service made (by kind, from GET /tasks/{uuid}/summaries), the background jobs (GET /jobs), the
server's RSS when the replay starts and its peak over the replay, and its CPU seconds beside
the client's. After the wall time, the background jobs (condenses still running, final
summaries) are waited for, untimed, so the counts are complete.
"""

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.harness import (
    REPO,
    PeakRSS,
    Report,
    Service,
    Table,
    async_http_client,
    cpu_seconds,
    mib,
    percentile,
    task_body,
)

CORPUS = REPO.parent / "shared" / "corpus" / "trajectories"
WINDOWS = (8_000, 32_000, 128_000)
QUICK_TRAJECTORIES = 3
QUICK_MESSAGES = 30
SETTLE_TIMEOUT_S = 120.0
# A payload before one assistant message in PAYLOAD_EVERY (1: before each, as an agent does).
# 2 keeps the full run within its 3-minute budget: with 1 it took 227 s, bound by the service's
# CPU (payload reads were about half of it at 32k and 128k), against 158 s with 2.
PAYLOAD_EVERY = 2
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass
class Trajectory:
    """One corpus file: its leading system message (the task's system prompt) and the rest,
    each message already serialised, so the client's JSON work stays out of the timings."""

    name: str
    system_prompt: str | None
    roles: list[str]
    bodies: list[bytes]

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.bodies) + len((self.system_prompt or "").encode())


def load_trajectory(path: Path, limit: int | None) -> Trajectory:
    lines = path.read_text(encoding="utf-8").splitlines()
    messages: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
    messages = messages[:limit]
    system_prompt = None
    if messages and messages[0]["role"] == "system":
        system_prompt = messages.pop(0)["content"]
    # ensure_ascii=False: escaped Japanese would be 6 bytes a character, and the largest tool
    # output (1.3M characters) would then pass the service's 8 MiB limit on a message.
    bodies = [json.dumps(m, ensure_ascii=False).encode() for m in messages]
    return Trajectory(path.stem, system_prompt, [m["role"] for m in messages], bodies)


def load_corpus(quick: bool) -> list[Trajectory]:
    paths = sorted(CORPUS.glob("*.jsonl"))
    if quick:
        # Spread over the sorted names: different sources, tool calls and plain chat.
        step = len(paths) // QUICK_TRAJECTORIES
        paths = paths[::step][:QUICK_TRAJECTORIES]
    return [load_trajectory(p, QUICK_MESSAGES if quick else None) for p in paths]


@dataclass
class Tally:
    """What the agents of one window saw."""

    append_s: list[float] = field(default_factory=list)
    payload_s: list[float] = field(default_factory=list)
    payload_bytes: int = 0
    over_budget: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # "append 409", "request 413"...
    uuids: list[str] = field(default_factory=list)
    requests: int = 0  # every request an agent made, refused or not

    def refused(self, what: str, response: httpx.Response) -> None:
        self.statuses[f"{what} {response.status_code}"] += 1


async def fetch_payload(client: httpx.AsyncClient, uuid: str, tally: Tally) -> None:
    tally.requests += 1
    started = time.perf_counter()
    response = await client.get(f"/tasks/{uuid}/request")
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        tally.refused("request", response)
        return
    tally.payload_s.append(elapsed)
    tally.payload_bytes += len(response.content)
    tokens = int(response.headers["X-Context-Tokens"])
    if tokens > int(response.headers["X-Context-Budget"]):
        tally.over_budget += 1


async def agent(
    client: httpx.AsyncClient, trajectory: Trajectory, window: int, tally: Tally
) -> None:
    body = task_body(
        window, max_output_tokens=max_output_tokens(window), system_prompt=trajectory.system_prompt
    )
    tally.requests += 1
    response = await client.post("/tasks", json=body)
    if response.status_code != 201:
        tally.refused("create", response)
        return
    uuid: str = response.json()["uuid"]
    tally.uuids.append(uuid)
    turns = 0
    for role, message in zip(trajectory.roles, trajectory.bodies, strict=True):
        if role == "assistant":
            turns += 1
            if turns % PAYLOAD_EVERY == 0:
                await fetch_payload(client, uuid, tally)
        tally.requests += 1
        started = time.perf_counter()
        response = await client.post(
            f"/tasks/{uuid}/messages", content=message, headers=JSON_HEADERS
        )
        if response.status_code == 201:
            tally.append_s.append(time.perf_counter() - started)
        else:
            tally.refused("append", response)
    tally.requests += 1
    response = await client.post(f"/tasks/{uuid}/complete")
    if response.status_code != 200:
        tally.refused("complete", response)


def max_output_tokens(window: int) -> int:
    """An output reserve in proportion to the window, as agents configure it."""
    return min(4096, window // 8)


async def jobs_of(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    response = await client.get("/jobs", params={"task_uuid": uuid, "limit": 1000})
    response.raise_for_status()
    jobs: list[dict[str, Any]] = response.json()["jobs"]
    return jobs


async def settle(client: httpx.AsyncClient, uuids: list[str]) -> bool:
    """Wait until no job of these tasks is queued or running; False after SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    pending = list(uuids)
    while pending and time.monotonic() < deadline:
        lists = await asyncio.gather(*(jobs_of(client, u) for u in pending))
        pending = [
            u
            for u, jobs in zip(pending, lists, strict=True)
            if any(j["status"] in ("queued", "running") for j in jobs)
        ]
        if pending:
            await asyncio.sleep(0.2)
    return not pending


async def summary_kinds(client: httpx.AsyncClient, uuid: str) -> Counter[str]:
    kinds: Counter[str] = Counter()
    after = 0
    while True:
        response = await client.get(
            f"/tasks/{uuid}/summaries", params={"after_id": after, "limit": 1000}
        )
        response.raise_for_status()
        page = response.json()
        kinds.update(s["kind"] for s in page["summaries"])
        if page["next_after_id"] is None:
            return kinds
        after = page["next_after_id"]


async def outcome(client: httpx.AsyncClient, uuids: list[str]) -> dict[str, Any]:
    """Compactions by kind and jobs by kind and status, summed over the tasks; the tasks'
    own compression_count beside them as a cross-check."""
    kinds: Counter[str] = Counter()
    jobs: dict[str, Counter[str]] = {}
    reasons: Counter[str] = Counter()  # why jobs were skipped
    counted = 0
    for uuid in uuids:
        kinds.update(await summary_kinds(client, uuid))
        for job in await jobs_of(client, uuid):
            jobs.setdefault(job["kind"], Counter())[job["status"]] += 1
            if job["status"] == "skipped":
                result = job["result"] or {}
                # A compaction's outcome gives a reason; a refused job (e.g. task completed) a code.
                reasons[str(result.get("reason") or result.get("skipped"))] += 1
        task = (await client.get(f"/tasks/{uuid}")).json()
        counted += task["statistics"]["compression_count"]
    return {
        "compactions": dict(kinds),
        "compression_count": counted,
        "jobs": {kind: dict(statuses) for kind, statuses in jobs.items()},
        "skip_reasons": dict(reasons),
    }


async def replay(service: Service, corpus: list[Trajectory], window: int) -> dict[str, Any]:
    tally = Tally()
    me = psutil.Process()
    async with async_http_client(service, len(corpus) + 8, 300) as client:
        cpu = service.cpu_seconds(), cpu_seconds(me)
        started = time.perf_counter()
        await asyncio.gather(*(agent(client, t, window, tally) for t in corpus))
        wall_s = time.perf_counter() - started
        cpu = service.cpu_seconds() - cpu[0], cpu_seconds(me) - cpu[1]
        started = time.perf_counter()
        settled = await settle(client, tally.uuids)
        settle_s = time.perf_counter() - started
        counts = await outcome(client, tally.uuids)
    return {
        "window": window,
        "max_output_tokens": max_output_tokens(window),
        "agents": len(corpus),
        "messages": len(tally.append_s),
        "payloads": len(tally.payload_s),
        "payload_mib": mib(tally.payload_bytes),
        "over_budget": tally.over_budget,
        "refusals": dict(tally.statuses),
        "wall_s": round(wall_s, 2),
        "msg_per_s": round(len(tally.append_s) / wall_s, 1),
        "append_ms": milliseconds(tally.append_s),
        "payload_ms": milliseconds(tally.payload_s),
        "server_cpu_s": round(cpu[0], 1),
        # Every request the agents made: creates, appends, payloads, completes.
        "server_cpu_ms_per_request": round(cpu[0] * 1000 / tally.requests, 2),
        "client_cpu_s": round(cpu[1], 1),
        "settle_s": round(settle_s, 2),
        "settled": settled,
        **counts,
    }


def milliseconds(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "p50": round(percentile(seconds, 50) * 1000, 1),
        "p99": round(percentile(seconds, 99) * 1000, 1),
        "max": round(max(seconds) * 1000, 1),
    }


def replay_window(
    scratch: Path, corpus: list[Trajectory], window: int, **env: str
) -> dict[str, Any]:
    name = "-".join([f"window-{window}", *env])
    with Service(scratch / name / "contexts", FSYNC="always", **env) as service:
        rss_start = service.rss()
        with PeakRSS(service) as peak:
            result = asyncio.run(replay(service, corpus, window))
    return result | {
        "env": " ".join(f"{k}={v}" for k, v in env.items()),
        "rss_start_mib": mib(rss_start),
        "peak_rss_mib": mib(peak.peak),
    }


def run(quick: bool, scratch: Path) -> Report:
    corpus = load_corpus(quick)
    windows = WINDOWS[:1] if quick else WINDOWS
    results = [replay_window(scratch, corpus, w) for w in windows]
    # Most of the RSS a replay adds is glibc's per-thread malloc arenas (I/O threads, SQLite's):
    # the same replay with two arenas, as the Dockerfile sets.
    results.append(replay_window(scratch, corpus, windows[0], MALLOC_ARENA_MAX="2"))
    return report(corpus, results)


def describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "0"


COLUMNS = [
    "window",
    "service env",
    "agents",
    "messages",
    "payloads",
    "wall s",
    "msg/s",
    "server CPU s",
    "append p50 ms",
    "append p99 ms",
    "payload p50 ms",
    "payload p99 ms",
    "compactions",
    "condense jobs",
    "peak RSS MiB",
    "RSS at start MiB",
    "refusals",
]


def row(r: dict[str, Any]) -> list[Any]:
    refusals = dict(r["refusals"])
    if r["over_budget"]:
        refusals["over budget"] = r["over_budget"]
    return [
        r["window"],
        r["env"] or "defaults",
        r["agents"],
        r["messages"],
        r["payloads"],
        r["wall_s"],
        r["msg_per_s"],
        r["server_cpu_s"],
        r["append_ms"]["p50"],
        r["append_ms"]["p99"],
        r["payload_ms"]["p50"],
        r["payload_ms"]["p99"],
        describe(r["compactions"]),
        describe(r["jobs"].get("condense", {})),
        r["peak_rss_mib"],
        r["rss_start_mib"],
        describe(refusals),
    ]


def notes(corpus: list[Trajectory], results: list[dict[str, Any]]) -> list[str]:
    size = sum(t.size for t in corpus)
    which = "each assistant message, as it would before its LLM call"
    if PAYLOAD_EVERY > 1:
        which = (
            f"one assistant message in {PAYLOAD_EVERY} (one before each, as an agent asks before "
            "each LLM call, takes the full run past its 3-minute budget)"
        )
    per_request = ", ".join(f"{r['server_cpu_ms_per_request']:.0f}" for r in results)
    return [
        f"{len(corpus)} trajectories, {sum(len(t.bodies) for t in corpus):,} messages and "
        f"{mib(size)} MiB of JSON (the largest {mib(max(t.size for t in corpus))} MiB) replayed "
        "per window, one agent per trajectory, all at once, each against a fresh service "
        "(SQLite, extractive summariser, FSYNC=always).",
        f"Each agent fetches its payload before {which}; latencies include queueing behind the "
        "other agents on two cores shared with the load generator, so compare windows rather "
        "than read them as one request's cost.",
        f"Server CPU s close to wall s means the service's CPU bounds the replay ({per_request} "
        "ms of server CPU per request, by window), not the disk's fsyncs.",
        "Compactions are the summaries.jsonl records by kind: a smaller window compacts far "
        "more, in /request (condense, else truncation, elision) and in background condense jobs; "
        "a job is skipped mostly when /request has compacted first (too few messages left) or "
        "the task has completed.",
        "Peak RSS is the kernel's high-water mark over the replay (VmHWM, reset at its start): it "
        "should barely move with the window, since payloads stream from current.jsonl; its rise "
        "over the RSS at start, far above the corpus size, is mostly what glibc's per-thread "
        "malloc arenas keep after large messages: the last row is the first replayed again with "
        "MALLOC_ARENA_MAX=2 (two arenas, as the Dockerfile sets).",
        "Refusals count every answer other than 201 (create, append) or 200 (request, complete), "
        "and payloads over their budget; background jobs (condenses, final summaries) are waited "
        "for after the wall time, so the counts are complete.",
    ]


def report(corpus: list[Trajectory], results: list[dict[str, Any]]) -> Report:
    table = Table("corpus replay", COLUMNS, [row(r) for r in results], notes(corpus, results))
    data = {
        "corpus": {
            "trajectories": [t.name for t in corpus],
            "messages": sum(len(t.bodies) for t in corpus),
            "bytes": sum(t.size for t in corpus),
        },
        "payload_every": PAYLOAD_EVERY,
        "windows": results,
    }
    return Report([table], data)
