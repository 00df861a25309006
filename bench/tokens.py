"""Token counting: what the exact counter (o200k_base) costs per append against the heuristic,
and what share of an append's time it takes.

The append path counts a message once, in ``ContextAccumulator.prepare``
(app/context/records.py): ``TokenCosts(counter).message(openai_message(record))``
(app/formats/costs.py), which counts the message as OpenAI, Anthropic and Ollama render it, each
text once (a per-message memo). The counter is the task's, fixed at creation from TOKEN_COUNTER:
"auto" gives o200k_base for the bench's model (gpt-4o), so o200k_base is what "auto" costs here.

The messages are real ones: every trajectory of ../shared/corpus/trajectories/ gives its first
messages in proportion to its length, about 2,000 in all (quick: about 100), so every source is
in the mix (English, Japanese, tool calls, huge tool outputs).

In-process: that same ``TokenCosts.message`` call, timed per message (the best of a few passes)
with the exact counter and with the heuristic; the encoding's one-time load is timed apart.

Over HTTP: two real services, TOKEN_COUNTER=o200k_base and TOKEN_COUNTER=heuristic, both
FSYNC=never (an fsync would hide the CPU cost), each gets the same messages (a smaller sample of
the same trajectories, about 300, to fit the time budget), one per request, from 1 agent and
from 8 concurrent agents. The messages are cut into pieces where no tool call is open, each piece
its own task (a window of 100M tokens: nothing is compacted); 1 agent appends them in corpus
order, 8 agents share them out by size. Each case runs twice, the two services alternating case
by case, and the better round is shown. The share of append time spent counting is the
in-process counting time of the appended messages over the run's wall time.
"""

import asyncio
import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.context.records import openai_message
from app.formats import FORMATS
from app.formats.costs import TokenCosts
from app.messages.schemas import MessageIn
from app.tokens.counters import HeuristicCounter, TextCounter, TiktokenCounter
from app.tokens.encodings import build_encoding, bundled_rank_file
from bench.harness import (
    REPO,
    Report,
    Service,
    Table,
    async_http_client,
    create_task,
    http_client,
    percentile,
)

CORPUS = REPO.parent / "shared" / "corpus" / "trajectories"
EXACT = "o200k_base"
HEURISTIC = "heuristic"
COUNTERS = (EXACT, "cl100k_base", HEURISTIC)  # in-process; the services run EXACT and HEURISTIC
AGENTS = (1, 8)
WINDOW = 100_000_000  # the largest context_length app/tasks/schemas.py takes: no compaction
WARM_UP_MESSAGES = 20

Message = dict[str, Any]


@dataclass
class Trajectory:
    source: str  # the corpus file's name
    messages: list[Message]


@dataclass
class Piece:
    """Messages that make one task: they start and end where no tool call is open."""

    messages: list[Message]

    @cached_property
    def bytes(self) -> int:
        return sum(len(orjson.dumps(m)) for m in self.messages)


# --- the messages -----------------------------------------------------------------------------


def load_sample(target: int) -> list[Trajectory]:
    """Each trajectory's first messages, in proportion to its length: ``target`` in all, about."""
    trajectories = [
        Trajectory(path.name, [json.loads(line) for line in path.open() if line.strip()])
        for path in sorted(CORPUS.glob("*.jsonl"))
    ]
    total = sum(len(t.messages) for t in trajectories)
    return [
        Trajectory(t.source, t.messages[: math.ceil(len(t.messages) * target / total)])
        for t in trajectories
    ]


def closed_points(messages: Sequence[Message]) -> list[int]:
    """Indices after which no tool call is open: where a task may end and the next begin."""
    open_calls: set[str] = set()
    points = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            open_calls.discard(message["tool_call_id"])
        elif message["role"] == "assistant":
            open_calls.update(call["id"] for call in message.get("tool_calls") or ())
        if not open_calls:
            points.append(index + 1)
    return points


def closed_prefix(trajectory: Trajectory) -> Trajectory:
    """The trajectory up to its last point where no tool call is open."""
    points = closed_points(trajectory.messages)
    return Trajectory(trajectory.source, trajectory.messages[: points[-1] if points else 0])


def cut_pieces(trajectories: Sequence[Trajectory], size: int) -> list[Piece]:
    """The trajectories one after the other (each must end with no call open), in pieces of
    ``size`` messages or a few more: a piece may hold the end of one and the start of the next."""
    messages = [m for t in trajectories for m in t.messages]
    pieces, start = [], 0
    for point in closed_points(messages):
        if point - start >= size:
            pieces.append(Piece(messages[start:point]))
            start = point
    if start < len(messages):
        pieces.append(Piece(messages[start:]))
    return pieces


def share_out(pieces: Sequence[Piece], agents: int) -> list[list[Piece]]:
    """Pieces dealt to agents, largest first to the least loaded, so they finish together."""
    shares: list[list[Piece]] = [[] for _ in range(agents)]
    loads = [0] * agents
    for piece in sorted(pieces, key=lambda p: p.bytes, reverse=True):
        least = loads.index(min(loads))
        shares[least].append(piece)
        loads[least] += piece.bytes
    return shares


def as_counted(message: Message) -> Message:
    """What the append path hands to ``TokenCosts.message``: the message validated and stored
    as the service does (MessageIn.fields), then rendered as OpenAI's request shape."""
    return openai_message({"seq": 1, **MessageIn.model_validate(message).fields()})


# --- in-process -------------------------------------------------------------------------------


class TextTally:
    """A counter that adds up the characters and tokens of the texts it is asked about."""

    def __init__(self, counter: TextCounter) -> None:
        self.name = counter.name
        self._counter = counter
        self.chars = 0
        self.tokens = 0

    def count_text(self, text: str) -> int:
        tokens = self._counter.count_text(text)
        self.chars += len(text)
        self.tokens += tokens
        return tokens


@dataclass
class CounterTiming:
    counter: str
    load_s: float  # building the encoding, once per process (0 for the heuristic)
    ns: list[int]  # per message: the best of the passes
    tokens: list[int]  # per message: OpenAI's cost, as the service stores it
    text_chars: int = 0
    text_tokens: int = 0

    @property
    def total_us(self) -> float:
        return sum(self.ns) / 1000


def make_counter(name: str) -> tuple[TextCounter, float]:
    """The counter and how long it took to build; built here, not through the service's
    process-wide cache, so the load is timed even if something loaded it before."""
    if name == HEURISTIC:
        return HeuristicCounter(), 0.0
    started = time.perf_counter()
    encoding = build_encoding(name, bundled_rank_file(name))
    return TiktokenCounter(encoding), time.perf_counter() - started


def time_counter(name: str, messages: Sequence[Message], passes: int) -> CounterTiming:
    counter, load_s = make_counter(name)
    costs = TokenCosts(counter)
    best = [math.inf] * len(messages)
    tokens = [0] * len(messages)
    for _ in range(passes):
        for index, message in enumerate(messages):
            started = time.perf_counter_ns()
            tokens[index], _ = costs.message(message)
            best[index] = min(best[index], time.perf_counter_ns() - started)
    tally = TextTally(counter)  # untimed: the texts OpenAI's rendering counts
    for message in messages:
        FORMATS["openai"].message_tokens(tally, message)
    return CounterTiming(name, load_s, [int(ns) for ns in best], tokens, tally.chars, tally.tokens)


# --- over HTTP --------------------------------------------------------------------------------


@dataclass
class AppendRun:
    counter: str
    agents: int
    messages: int
    seconds: float
    latencies: list[float]
    server_cpu_s: float
    compactions: int
    counting_us: float = 0.0  # in-process counting time of these messages with this counter

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def counting_share(self) -> float:
        """Counting time per message over the service's time per message (wall / messages; for
        1 agent that is the mean append latency)."""
        return self.counting_us / (self.seconds * 1e6)

    def row(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "agents": self.agents,
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
            "per_s": round(self.per_s, 1),
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 2),
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 2),
            "mean_ms": round(sum(self.latencies) / len(self.latencies) * 1000, 2),
            "server_cpu_ms_per_message": round(self.server_cpu_s / self.messages * 1000, 3),
            "counting_share": round(self.counting_share, 4),
            "compactions": self.compactions,
        }


def create_tasks(service: Service, count: int) -> list[str]:
    with http_client(service) as client:
        return [create_task(client, WINDOW) for _ in range(count)]


def compactions(service: Service, uuids: Sequence[str]) -> int:
    with http_client(service) as client:
        total = 0
        for task_uuid in uuids:
            response = client.get(f"/tasks/{task_uuid}")
            response.raise_for_status()
            total += response.json()["statistics"]["compression_count"]
        return total


async def append_all(
    service: Service, shares: Sequence[Sequence[tuple[str, Piece]]]
) -> tuple[float, list[float], float]:
    """Each share's pieces appended by one agent, one message per request: (wall seconds,
    latencies, server CPU seconds)."""
    latencies: list[float] = []

    async def agent(client: httpx.AsyncClient, share: Sequence[tuple[str, Piece]]) -> None:
        for task_uuid, piece in share:
            for message in piece.messages:
                started = time.perf_counter()
                response = await client.post(f"/tasks/{task_uuid}/messages", json=message)
                latencies.append(time.perf_counter() - started)
                response.raise_for_status()

    async with async_http_client(service, len(shares)) as client:
        cpu = service.cpu_seconds()
        started = time.perf_counter()
        await asyncio.gather(*(agent(client, share) for share in shares))
        seconds = time.perf_counter() - started
    return seconds, latencies, service.cpu_seconds() - cpu


def run_appends(service: Service, counter: str, pieces: Sequence[Piece], agents: int) -> AppendRun:
    uuids = create_tasks(service, len(pieces))  # untimed
    task_of = {id(piece): task_uuid for piece, task_uuid in zip(pieces, uuids, strict=True)}
    shares = [[(task_of[id(p)], p) for p in share] for share in share_out(pieces, agents)]
    if agents == 1:  # one agent: the corpus order
        shares = [list(zip(uuids, pieces, strict=True))]
    seconds, latencies, server_cpu = asyncio.run(append_all(service, shares))
    messages = sum(len(p.messages) for p in pieces)
    return AppendRun(
        counter, agents, messages, seconds, latencies, server_cpu, compactions(service, uuids)
    )


def warm_up(service: Service, pieces: Sequence[Piece]) -> None:
    """A few appends first: the first requests pay for imports, caches and SQLite warming."""
    messages = [m for p in pieces for m in p.messages][:WARM_UP_MESSAGES]
    warm = Piece(messages[: (closed_points(messages) or [len(messages)])[-1]])
    run_appends(service, "warm-up", [warm], 1)


# --- the run ----------------------------------------------------------------------------------


def start_services(scratch: Path) -> dict[str, Service]:
    """The exact and the heuristic service, started side by side (each start waits for ready)."""

    def start(counter: str) -> Service:
        return Service(scratch / counter / "contexts", FSYNC="never", TOKEN_COUNTER=counter)

    with ThreadPoolExecutor(2) as pool:
        futures = {counter: pool.submit(start, counter) for counter in (EXACT, HEURISTIC)}
    failed = [f.exception() for f in futures.values() if f.exception() is not None]
    if failed:
        for future in futures.values():
            if future.exception() is None:
                future.result().close()
        raise RuntimeError("a service did not start") from failed[0]
    return {counter: future.result() for counter, future in futures.items()}


def prefix_us(
    timing: CounterTiming, sample: Sequence[Trajectory], subset: Sequence[Trajectory]
) -> float:
    """Counting time of ``subset`` (each trajectory a prefix of ``sample``'s), in µs."""
    total, start = 0, 0
    for whole, part in zip(sample, subset, strict=True):
        total += sum(timing.ns[start : start + len(part.messages)])
        start += len(whole.messages)
    return total / 1000


def measure_appends(
    scratch: Path, pieces: Sequence[Piece], rounds: int
) -> tuple[list[AppendRun], dict[str, float]]:
    """Every case ``rounds`` times; within a round the two services alternate case by case (and
    the one that goes first changes each round), so drifting load on the machine hits both
    alike. Returns the runs and the ready times."""
    runs: list[AppendRun] = []
    services = start_services(scratch)
    try:
        for service in services.values():
            warm_up(service, pieces)
        for round_ in range(rounds):
            order = list(services.items())[:: -1 if round_ % 2 else 1]  # neither always first
            for agents in AGENTS:
                runs += [run_appends(s, name, pieces, agents) for name, s in order]
        return runs, {name: round(s.ready_after_s, 3) for name, s in services.items()}
    finally:
        for service in services.values():
            service.close()


def best_runs(runs: Sequence[AppendRun]) -> list[AppendRun]:
    """Per (counter, agents), the round with the most msg/s: the one the machine disturbed least."""
    best: dict[tuple[str, int], AppendRun] = {}
    for append_run in runs:
        key = (append_run.counter, append_run.agents)
        if key not in best or append_run.per_s > best[key].per_s:
            best[key] = append_run
    return list(best.values())


@dataclass(frozen=True)
class Sizes:
    sample: int  # messages counted in-process
    http_sample: int  # messages appended per case (the first of the same trajectories)
    passes: int  # in-process passes; each message's best is kept
    rounds: int  # of the HTTP cases; each case's best round is shown
    pieces_per_agent: int  # tasks per agent with the most agents: to share the load out evenly


FULL = Sizes(sample=2000, http_sample=300, passes=2, rounds=2, pieces_per_agent=3)
QUICK = Sizes(sample=100, http_sample=60, passes=1, rounds=1, pieces_per_agent=1)


def run(quick: bool, scratch: Path) -> Report:
    sizes = QUICK if quick else FULL
    started = time.perf_counter()
    sample = load_sample(sizes.sample)
    messages = [m for t in sample for m in t.messages]
    counted = [as_counted(m) for m in messages]
    names = (EXACT, HEURISTIC) if quick else COUNTERS  # cl100k_base: one more row, same code
    timings = {name: time_counter(name, counted, sizes.passes) for name in names}
    in_process_s = time.perf_counter() - started
    http_sample = [closed_prefix(t) for t in load_sample(sizes.http_sample)]
    appended = sum(len(t.messages) for t in http_sample)
    pieces = cut_pieces(http_sample, max(1, appended // (sizes.pieces_per_agent * max(AGENTS))))
    runs, ready_s = measure_appends(scratch, pieces, sizes.rounds)
    for append_run in runs:
        append_run.counting_us = prefix_us(timings[append_run.counter], sample, http_sample)
    result = report(sample, messages, timings, runs, ready_s, pieces, sizes.rounds)
    result.data["phase_seconds"] = {
        "in_process": round(in_process_s, 1),
        "http": round(time.perf_counter() - started - in_process_s, 1),
    }
    return result


def per_source(
    trajectories: Sequence[Trajectory],
    messages: Sequence[Message],
    timings: dict[str, CounterTiming],
) -> list[dict[str, Any]]:
    """Per corpus file: size, tokens and counting time by counter (how far the heuristic strays
    depends on the language and on how much is code or JSON)."""
    rows, start = [], 0
    for trajectory in trajectories:
        end = start + len(trajectory.messages)
        row: dict[str, Any] = {
            "source": trajectory.source,
            "messages": len(trajectory.messages),
            "bytes": sum(len(orjson.dumps(m)) for m in messages[start:end]),
        }
        for name, timing in timings.items():
            row[f"{name}_tokens"] = sum(timing.tokens[start:end])
            row[f"{name}_us"] = round(sum(timing.ns[start:end]) / 1000, 1)
        rows.append(row)
        start = end
    return rows


def heuristic_spread(sources: Sequence[dict[str, Any]]) -> str:
    """The lowest and highest heuristic/exact token ratio of a corpus file (one with at least
    1,000 exact tokens: smaller ones say little)."""
    counted = [row for row in sources if row[f"{EXACT}_tokens"] >= 1000] or sources
    ratios = sorted(
        (row[f"{HEURISTIC}_tokens"] / row[f"{EXACT}_tokens"], row["source"].removesuffix(".jsonl"))
        for row in counted
    )
    (low, low_source), (high, high_source) = ratios[0], ratios[-1]
    return f"{low:.2f} ({low_source}) to {high:.2f} ({high_source})"


def counting_table(
    messages: Sequence[Message], timings: dict[str, CounterTiming], spread: str
) -> Table:
    kb = sum(len(orjson.dumps(m)) for m in messages) / 1000
    exact_tokens = sum(timings[EXACT].tokens)
    columns = ["counter", "µs/msg", "µs/KB", "p50 µs", "max ms", "tokens total", "÷ exact"]
    table = Table("token counting per message (in-process)", [*columns, "chars/token", "load ms"])
    for name, timing in timings.items():
        table.rows.append(
            [
                name,
                round(timing.total_us / len(messages), 1),
                round(timing.total_us / kb, 2),
                round(percentile([float(ns) for ns in timing.ns], 50) / 1000, 1),
                round(max(timing.ns) / 1e6, 1),
                sum(timing.tokens),
                f"{sum(timing.tokens) / exact_tokens:.3f}",
                round(timing.text_chars / max(1, timing.text_tokens), 2),
                round(timing.load_s * 1000, 1),
            ]
        )
    table.notes = [
        f"{len(messages):,} corpus messages ({kb / 1000:.1f} MB as posted), each counted as the "
        "append path does: TokenCosts.message (OpenAI + Anthropic + Ollama renderings), the best "
        "of the passes; µs/KB is per KB of the message as posted (JSON); max ms: the costliest "
        "message (the corpus holds a 1.4 MB tool output).",
        "tokens total: OpenAI's cost as stored with each message (framing included); '÷ exact': "
        f"over {EXACT}'s total; chars/token: of the texts counted; load ms: building the "
        "encoding from the bundled ranks, once per process (the service does it at startup).",
        f"Per corpus file the heuristic's total over {EXACT}'s runs from {spread}: it "
        "undercounts Japanese text about twofold (see per_source in the data).",
    ]
    return table


def appends_table(
    runs: Sequence[AppendRun], pieces: Sequence[Piece], ready_s: dict[str, float], rounds: int
) -> Table:
    columns = ["counter", "agents", "msg/s", "p50 ms", "mean ms", "server CPU ms/msg"]
    table = Table("appends by counter", [*columns, "counting share %", "msg/s ÷ exact"])
    exact_per_s = {r.agents: r.per_s for r in runs if r.counter == EXACT}
    for append_run in runs:
        row = append_run.row()
        table.rows.append(
            [
                append_run.counter,
                append_run.agents,
                row["per_s"],
                row["p50_ms"],
                row["mean_ms"],
                row["server_cpu_ms_per_message"],
                round(append_run.counting_share * 100, 1),
                f"{append_run.per_s / exact_per_s[append_run.agents]:.2f}",
            ]
        )
    messages = sum(len(p.messages) for p in pieces)
    table.notes = [
        f"The same {messages:,} messages (the first of the same trajectories), one per request, "
        f"in {len(pieces)} tasks with a window of {WINDOW:,} tokens (compactions seen: "
        f"{sum(r.compactions for r in runs)}); each case's best of {rounds} round(s). Both "
        "services run FSYNC=never so that no fsync hides the CPU cost of counting.",
        "counting share: the in-process counting time of these messages over the run's wall time "
        "(for 1 agent that is the mean append latency); 'msg/s ÷ exact': throughput over the "
        "exact counter's at the same concurrency (1 - 1/ratio: the append time counting costs).",
        "The counting share is smaller than the round-to-round spread of msg/s on a shared "
        "machine (appends_all_rounds in the data): read 'msg/s ÷ exact' as noise around 1 unless "
        "it moves by more than the share.",
        f"Time to ready: {ready_s[EXACT]} s with {EXACT} (it loads the encoding at startup), "
        f"{ready_s[HEURISTIC]} s with the heuristic.",
    ]
    return table


def report(
    sample: Sequence[Trajectory],
    messages: Sequence[Message],
    timings: dict[str, CounterTiming],
    runs: Sequence[AppendRun],
    ready_s: dict[str, float],
    pieces: Sequence[Piece],
    rounds: int,
) -> Report:
    kb = sum(len(orjson.dumps(m)) for m in messages) / 1000
    sources = per_source(sample, messages, timings)
    tables = [
        counting_table(messages, timings, heuristic_spread(sources)),
        appends_table(best_runs(runs), pieces, ready_s, rounds),
    ]
    data = {
        "messages": len(messages),
        "message_kb": round(kb, 1),
        "http_messages": sum(len(p.messages) for p in pieces),
        "http_message_kb": round(sum(p.bytes for p in pieces) / 1000, 1),
        "tasks_per_case": len(pieces),
        "counters": {
            name: {
                "load_ms": round(t.load_s * 1000, 1),
                "us_per_message": round(t.total_us / len(messages), 2),
                "us_per_kb": round(t.total_us / kb, 3),
                "tokens_total": sum(t.tokens),
                "text_chars": t.text_chars,
                "text_tokens": t.text_tokens,
            }
            for name, t in timings.items()
        },
        "per_source": sources,
        "appends_all_rounds": [r.row() for r in runs],
        "http_counting_us_per_message": {
            r.counter: round(r.counting_us / r.messages, 2) for r in runs
        },
        "ready_s": ready_s,
    }
    return Report(tables, data)
