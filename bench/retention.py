"""Retention: what each payload still holds of the history so far, by compaction strategy.

The corpus trajectories are replayed into the real app in this process (over
``httpx.AsyncClient(ASGITransport)``; SQLite, the extractive summariser, FSYNC=never: the disk is
not what is measured) at windows of 8,000, 32,000 and 128,000 tokens, once per strategy: an
app whose ``compaction_tiers`` setting names the tiers GET /request and background compaction
try, in order. Each trajectory is one task that pins a plan: a planning entry is posted right
after the task is created. Then, as an agent loop does, before each assistant message the agent
asks for its payload (GET /request), then posts the assistant message with what follows it up
to the next assistant message (its tool results, user turns) in one batch. Before each request
the task's background jobs are waited for: an LLM call takes seconds, time enough for a
condense the appends scheduled.

Every payload is checked against the whole history so far (``Facts``; ``check``):

* first instruction: the trajectory's first user message is a payload message, whole or elided
  (its start kept);
* user messages: each later user message is a payload message, whole or elided (its start
  kept), or quoted in a summary or a truncation marker (its first ``QUOTE_CHARS``);
* paths: the file paths the agent's tool calls acted on (path arguments, paths in commands) that
  appear anywhere in the payload's text;
* errors: the distinct error lines of tool outputs that appear anywhere in the payload's text;
* summary: the task's newest condense summary, once there is one, is in the payload (whole or cut);
* plan: the pinned plan is in the payload;
* tokens: X-Context-Tokens; summed over a replay, what the agent pays for its prompts;
* prefix stability: the share of the payload's messages that are byte-identical to the previous
  payload's, counted from the start; whether the payload kept the previous one whole (else the
  cache broke); and prefix reuse, the share of the previous payload's messages the payload
  starts with: what a provider's prompt cache, which holds the previous request, can serve
  again. (Prefix stability cannot reach 100% even for a context that never compacts: the
  messages a turn adds are new. Reuse can, so it is what the target is measured on.)

What counts as a path and as an error line is the extractive digest's published rules
(``app.summaries.rules``), so the digest is measured against what it sets out to keep;
whether a fact is in a payload is a plain substring test on the payload's whitespace-collapsed
text (every content, tool call and argument), independent of how the fact got there; but an
error line also counts when a summary lists it in a group of lines that differ in one value
("row 5, 28, 51 (3 more)" shows the lines of rows 5, 28 and 51).
"""

import asyncio
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import httpx
import orjson
from asgi_lifespan import LifespanManager

from app.compaction.service import SUMMARY_HEADER
from app.compaction.truncation import TRUNCATION_TEXT
from app.config import CompactionSettings, LLMSettings, LogSettings, Settings, StorageSettings
from app.main import create_app
from app.summaries.excerpts import ELLIPSIS, normalize
from app.summaries.layout import ROOT_TOKEN
from app.summaries.rules import (
    TIER_ACTED,
    record_errors,
    record_paths,
    record_text,
    shows_error_line,
    tool_calls,
)
from bench.harness import Report, Table, task_body
from bench.replay import CORPUS, WINDOWS, max_output_tokens

# --- the strategies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    name: str
    tiers: tuple[str, ...]  # the compaction.tiers setting

    def settings(self, context_dir: Path) -> Settings:
        return Settings(
            context_dir=context_dir,
            storage=StorageSettings(fsync="never"),
            llm=LLMSettings(backend="extractive"),
            log=LogSettings(level="WARNING"),
            compaction=CompactionSettings(tiers=self.tiers),
        )


TRUNCATE_ONLY = Strategy("truncate only", ("truncate", "elide"))
CONDENSE_FIRST = Strategy("condense, truncate", ("condense", "truncate", "elide"))
MASK_FIRST = Strategy("mask first", ("mask", "condense", "truncate", "elide"))
STRATEGIES = (TRUNCATE_ONLY, CONDENSE_FIRST, MASK_FIRST)
TODAY = CONDENSE_FIRST  # the default before masking
NEW_DEFAULT = MASK_FIRST

# --- the corpus ----------------------------------------------------------------------------

# A sample of the corpus, so that the full run takes minutes (replaying the whole of it per
# strategy and window takes about three times as long): the longest trajectory of each agent
# but the Japanese Codex runs (each dominated by one tool output of 0.5-1.3M characters), and
# shorter ones of every source (Japanese, many user turns, text protocols, a first instruction
# larger than the 8k window).
SAMPLE = (
    "aider__chat_2024-08-13_blame_chart",
    "claude-agent-sdk__ja_issue-453_evaluation",
    "claude-code__ccviewer_fe5e1c67_subagent",
    "claude-code__codemie_624a4a58",
    "claude-code__spotter_4d5611e5",
    "codex__codemie_rollout_019e1625",
    "mini-swe-agent__github_issue",
    "openhands__multiswe_ponyc-4588",
    "openhands__resolver_dark_mode",
    "swe-agent__ctf_web_i_got_id",
    "swe-agent__marshmallow-1867_function_calling_replace",
    "swe-agent__pydicom-1458_gpt4",
)
# Short files of different sources, for --quick and the test suite.
QUICK = (
    "swe-agent__marshmallow-1867_function_calling_replace",
    "openhands__multiswe_ponyc-4595",
    "claude-code__ccviewer_fe5e1c67_main",
)
PLAN = (
    "1. Read the request and find the code it is about.\n"
    "2. Reproduce the problem.\n"
    "3. Make the change.\n"
    "4. Run the tests and report."
)
# A long user message is quoted in a summary cut in the middle: its start identifies it.
QUOTE_CHARS = 200
CONCURRENT_AGENTS = 6
SETTLE_TIMEOUT_S = 120.0
SETTLE_POLL_S = 0.02


@dataclass
class Trajectory:
    name: str
    system_prompt: str | None
    turns: list[list[dict[str, Any]]]  # each starts with an assistant message (but maybe the first)


def load(name: str) -> Trajectory:
    lines = (CORPUS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    messages = [json.loads(line) for line in lines if line.strip()]
    system_prompt = messages.pop(0)["content"] if messages[0]["role"] == "system" else None
    turns: list[list[dict[str, Any]]] = [[]]
    for message in messages:
        if message["role"] == "assistant":
            turns.append([])
        turns[-1].append(message)
    return Trajectory(name, system_prompt, [turn for turn in turns if turn])


def corpus_names(quick: bool) -> tuple[str, ...]:
    return QUICK if quick else SAMPLE


# --- the measures --------------------------------------------------------------------------


@dataclass
class Facts:
    """What the history so far holds that a payload should keep: its first user message, the
    later ones (distinct texts), the paths tool calls acted on and the error lines of tool
    outputs (distinct, in first-seen order)."""

    first_instruction: str | None = None
    users: dict[str, None] = field(default_factory=dict)
    paths: dict[str, None] = field(default_factory=dict)
    errors: dict[str, None] = field(default_factory=dict)

    def add(self, message: dict[str, Any]) -> None:
        role = message["role"]
        if role == "user":
            text = record_text(message)
            if self.first_instruction is None:
                self.first_instruction = text
            elif text.strip():
                self.users.setdefault(text)
        for path, tier in record_paths(message):
            if tier == TIER_ACTED:
                self.paths.setdefault(path)
        if role == "tool":
            for line in record_errors(message):
                # A line the rules cut ends in "…": its start is the fact.
                self.errors.setdefault(line.removesuffix(ELLIPSIS).rstrip())


@dataclass
class Check:
    """One payload measured against the history so far."""

    tokens: int
    messages: int
    first_instruction: bool | None  # None: no user message yet
    users: tuple[int, int]  # (present, of)
    paths: tuple[int, int]
    errors: tuple[int, int]
    summary: bool | None  # None: no condense summary yet
    plan: bool
    prefix: float | None  # None: the first payload
    reuse: float | None  # the share of the previous payload it starts with
    kept_previous: bool | None


def message_text(message: dict[str, Any]) -> str:
    """A payload message's content, tool calls and their arguments (raw and parsed)."""
    parts = [record_text(message)]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts += [str(function.get("name")), str(function.get("arguments"))]
    parts += [str(value) for _, _, arguments in tool_calls(message) for value in arguments.values()]
    return "\n".join(parts)


SUMMARY_PREFIX = SUMMARY_HEADER.split("{", 1)[0]
TRUNCATION_PREFIX = TRUNCATION_TEXT.split("{", 1)[0]
_ROOT_LINE = re.compile(re.escape(ROOT_TOKEN) + r" = (\S+)")


def expanded(summary: str) -> str:
    """A digest that names a common directory ``$ROOT`` with its paths written out."""
    root = _ROOT_LINE.search(summary)
    return summary if root is None else summary.replace(ROOT_TOKEN, root.group(1))


def is_summary(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message["role"] == "user"
        and isinstance(content, str)
        and content.startswith(SUMMARY_PREFIX)
    )


def is_truncation(message: dict[str, Any]) -> bool:
    """A truncation marker, which quotes the user messages it hides."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(TRUNCATION_PREFIX)


def kept_whole_or_cut(text: str, payload: list[dict[str, Any]]) -> bool:
    """A payload user message is ``text``, or ``text`` elided (its start kept)."""
    start = text[:QUOTE_CHARS]
    return any(m["role"] == "user" and record_text(m).startswith(start) for m in payload)


def check(
    payload: list[dict[str, Any]],
    previous: list[dict[str, Any]] | None,
    facts: Facts,
    newest_summary: str | None,
    tokens: int,
) -> Check:
    """The payload measured against the history so far and the previous payload."""
    written_out = [expanded(m["content"]) for m in payload if is_summary(m)]
    summaries = [normalize(summary) for summary in written_out]
    truncations = [normalize(m["content"]) for m in payload if is_truncation(m)]
    text = normalize("\n".join(message_text(m) for m in payload))
    text += " " + " ".join(summaries)  # paths written with $ROOT, out in full
    items = [line[2:] for s in written_out for line in s.splitlines() if line.startswith("- ")]

    def shown(error: str) -> bool:
        """In the text, or listed with others in a summary's group of error lines."""
        return error in text or any(shows_error_line(normalize(i), error) for i in items)

    def quoted(user: str) -> bool:
        start = normalize(user)[:QUOTE_CHARS]
        return any(start in quoting for quoting in summaries + truncations)

    users = sum(kept_whole_or_cut(u, payload) or quoted(u) for u in facts.users)
    first = facts.first_instruction
    summary = None
    if newest_summary is not None:
        start = normalize(newest_summary)[:QUOTE_CHARS]
        summary = any(start in normalize(m["content"]) for m in payload if is_summary(m))
    prefix = reuse = kept = None
    if previous is not None:
        common = 0
        for before, now in zip(previous, payload, strict=False):
            if orjson.dumps(before) != orjson.dumps(now):
                break
            common += 1
        prefix = common / len(payload) if payload else 1.0
        reuse = common / len(previous) if previous else 1.0
        kept = common == len(previous)
    return Check(
        tokens=tokens,
        messages=len(payload),
        first_instruction=None if first is None else kept_whole_or_cut(first, payload),
        users=(users, len(facts.users)),
        paths=(sum(p in text for p in facts.paths), len(facts.paths)),
        errors=(sum(map(shown, facts.errors)), len(facts.errors)),
        summary=summary,
        plan=normalize(PLAN) in text,
        prefix=prefix,
        reuse=reuse,
        kept_previous=kept,
    )


# --- the replay ----------------------------------------------------------------------------


async def settle(client: httpx.AsyncClient, uuid: str) -> None:
    """Until no job of the task is queued or running."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        response = await client.get("/jobs", params={"task_uuid": uuid, "limit": 1000})
        response.raise_for_status()
        if all(j["status"] not in ("queued", "running") for j in response.json()["jobs"]):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs of {uuid} still running after {SETTLE_TIMEOUT_S} s")
        await asyncio.sleep(SETTLE_POLL_S)


class Summaries:
    """The task's compactions (GET /summaries), read on from where the last read ended."""

    def __init__(self, client: httpx.AsyncClient, uuid: str) -> None:
        self.client = client
        self.uuid = uuid
        self.after = 0
        self.kinds: dict[str, int] = {}
        self.newest_condense: str | None = None
        self.summariser_tokens = 0  # what a chat backend would read and write for the condenses

    async def read(self) -> None:
        while True:
            response = await self.client.get(
                f"/tasks/{self.uuid}/summaries", params={"after_id": self.after, "limit": 1000}
            )
            response.raise_for_status()
            page = response.json()
            for record in page["summaries"]:
                self.kinds[record["kind"]] = self.kinds.get(record["kind"], 0) + 1
                if record["kind"] == "condense":
                    self.newest_condense = record["summary"]
                    self.summariser_tokens += record["original_tokens"] + record["summary_tokens"]
                self.after = record["id"]
            if page["next_after_id"] is None:
                return


@dataclass
class Replay:
    """One trajectory at one window: every payload's check, and the compactions by kind."""

    name: str
    window: int
    checks: list[Check]
    compactions: dict[str, int]
    refused: dict[str, int]  # GET /request answers other than 200, by status
    summariser_tokens: int


async def replay(client: httpx.AsyncClient, trajectory: Trajectory, window: int) -> Replay:
    body = task_body(
        window,
        max_output_tokens=max_output_tokens(window),
        system_prompt=trajectory.system_prompt,
        pin_plan=True,
    )
    response = await client.post("/tasks", json=body)
    response.raise_for_status()
    uuid: str = response.json()["uuid"]
    response = await client.post(
        f"/tasks/{uuid}/planning", json={"plan_type": "initial", "plan_content": PLAN}
    )
    response.raise_for_status()
    facts = Facts()
    compactions = Summaries(client, uuid)
    checks: list[Check] = []
    previous: list[dict[str, Any]] = []
    appended: list[dict[str, Any]] = []
    refused: dict[str, int] = {}
    scheduled = True  # the plan may have taken the context over its threshold
    for turn in trajectory.turns:
        if turn[0]["role"] == "assistant":
            if scheduled:
                await settle(client, uuid)
            response = await client.get(f"/tasks/{uuid}/request")
            if response.status_code != 200:
                status = str(response.status_code)
                refused[status] = refused.get(status, 0) + 1
            else:
                payload = response.json()["messages"]
                # The summaries change only with a compaction: a job ran, or the payload is
                # not the previous one with the appended messages after it.
                if scheduled or payload != previous + appended:
                    await compactions.read()
                tokens = int(response.headers["X-Context-Tokens"])
                first = not checks
                checks.append(
                    check(
                        payload,
                        None if first else previous,
                        facts,
                        compactions.newest_condense,
                        tokens,
                    )
                )
                previous, appended = payload, []
            scheduled = False
        response = await client.post(f"/tasks/{uuid}/messages", json={"messages": turn})
        if response.status_code != 201:
            raise RuntimeError(f"{trajectory.name}: append {response.status_code} {response.text}")
        scheduled = scheduled or response.json()["compaction_scheduled"]
        appended += turn
        for message in turn:
            facts.add(message)
    await settle(client, uuid)
    await compactions.read()
    return Replay(
        trajectory.name, window, checks, compactions.kinds, refused, compactions.summariser_tokens
    )


async def replay_strategy(
    strategy: Strategy, corpus: list[Trajectory], windows: tuple[int, ...], scratch: Path
) -> list[Replay]:
    """Every trajectory at every window, into one app with the strategy's settings."""
    gate = asyncio.Semaphore(CONCURRENT_AGENTS)

    async def one(trajectory: Trajectory, window: int) -> Replay:
        async with gate:
            return await replay(client, trajectory, window)

    application = create_app(strategy.settings(scratch / "contexts"))
    async with LifespanManager(application, startup_timeout=60, shutdown_timeout=60) as started:
        transport = httpx.ASGITransport(app=started.app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://bench", timeout=300
        ) as client:
            return list(await asyncio.gather(*(one(t, w) for w in windows for t in corpus)))


# --- the report ----------------------------------------------------------------------------

TARGETS = {
    "first_instruction": 1.0,
    "summary": 1.0,
    "plan": 1.0,
    "users": 1.0,
    "paths": 0.95,
    "errors": 0.90,
    "reuse": 0.90,
}


def _share(values: list[bool | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _recall(pairs: list[tuple[int, int]]) -> float | None:
    """The mean over payloads of present/of (payloads with nothing to find left out)."""
    known = [present / of for present, of in pairs if of]
    return mean(known) if known else None


def summarise(replays: list[Replay]) -> dict[str, Any]:
    """One strategy at one window over the corpus: shares of payloads, mean recalls."""
    checks = [c for r in replays for c in r.checks]
    prefixes = [c.prefix for c in checks if c.prefix is not None]
    compactions: dict[str, int] = {}
    refused: dict[str, int] = {}
    for r in replays:
        for kind, count in r.compactions.items():
            compactions[kind] = compactions.get(kind, 0) + count
        for status, count in r.refused.items():
            refused[status] = refused.get(status, 0) + count
    return {
        "trajectories": len(replays),
        "payloads": len(checks),
        "refused": refused,
        "first_instruction": _share([c.first_instruction for c in checks]),
        "summary": _share([c.summary for c in checks]),
        "plan": _share([c.plan for c in checks]),
        "users": _recall([c.users for c in checks]),
        "paths": _recall([c.paths for c in checks]),
        "errors": _recall([c.errors for c in checks]),
        "prefix": mean(prefixes) if prefixes else None,
        "reuse": mean(c.reuse for c in checks if c.reuse is not None) if prefixes else None,
        "cache_broken": _share(
            [None if c.kept_previous is None else not c.kept_previous for c in checks]
        ),
        "tokens_sent": sum(c.tokens for c in checks),
        "summariser_tokens": sum(r.summariser_tokens for r in replays),
        "compactions": compactions,
    }


def per_trajectory(replay_: Replay) -> dict[str, Any]:
    return {"name": replay_.name, "window": replay_.window, **summarise([replay_])}


def verdicts(new: dict[str, Any], today: dict[str, Any]) -> dict[str, bool]:
    """The new default against its targets at one window."""
    passed = {
        name: new[name] is None or new[name] >= target - 1e-9 for name, target in TARGETS.items()
    }
    passed["tokens_sent"] = new["tokens_sent"] <= today["tokens_sent"]
    return passed


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


COLUMNS = [
    "strategy",
    "payloads",
    "refused (by status)",
    "first instruction",
    "newest summary",
    "pinned plan",
    "user messages",
    "file paths",
    "error lines",
    "prefix stability",
    "prefix reuse",
    "cache broken",
    "tokens sent",
    "summariser tokens",
    "compactions",
]


def _row(name: str, s: dict[str, Any]) -> list[Any]:
    return [
        name,
        s["payloads"],
        _counts(s["refused"]),
        *(_percent(s[k]) for k in ("first_instruction", "summary", "plan", "users")),
        *(_percent(s[k]) for k in ("paths", "errors", "prefix", "reuse", "cache_broken")),
        s["tokens_sent"],
        s["summariser_tokens"],
        _counts(s["compactions"]),
    ]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "0"


def window_table(window: int, results: dict[str, dict[str, Any]], ran: list[Strategy]) -> Table:
    table = Table(f"retention at a {window:,}-token window", COLUMNS)
    table.rows = [_row(s.name, results[s.name]) for s in ran]
    if NEW_DEFAULT in ran and TODAY in ran:
        passed = verdicts(results[NEW_DEFAULT.name], results[TODAY.name])
        failed = [name for name, ok in passed.items() if not ok]
        table.notes.append(
            f"{NEW_DEFAULT.name} against its targets: "
            + ("all met" if not failed else "missed " + ", ".join(failed))
        )
    return table


def run(quick: bool, scratch: Path) -> Report:
    corpus = [load(name) for name in corpus_names(quick)]
    windows = WINDOWS[:1] if quick else WINDOWS
    ran = list(STRATEGIES)
    by_strategy: dict[str, list[Replay]] = {}
    for strategy in ran:
        with tempfile.TemporaryDirectory(prefix="strategy-", dir=scratch) as directory:
            by_strategy[strategy.name] = asyncio.run(
                replay_strategy(strategy, corpus, windows, Path(directory))
            )
    results = {
        str(window): {
            name: summarise([r for r in replays if r.window == window])
            for name, replays in by_strategy.items()
        }
        for window in windows
    }
    tables = [window_table(w, results[str(w)], ran) for w in windows]
    tables[-1].notes += notes(corpus)
    data = {
        "trajectories": [t.name for t in corpus],
        "strategies": {s.name: list(s.tiers) for s in ran},
        "targets": TARGETS,
        "results": results,
        "verdicts": {
            str(w): verdicts(results[str(w)][NEW_DEFAULT.name], results[str(w)][TODAY.name])
            for w in windows
        },
        "per_trajectory": {
            name: [per_trajectory(r) for r in replays] for name, replays in by_strategy.items()
        },
    }
    return Report(tables, data)


def notes(corpus: list[Trajectory]) -> list[str]:
    turns = sum(len(t.turns) for t in corpus)
    return [
        f"{len(corpus)} trajectories ({turns:,} turns), one task each per window and strategy; "
        "the app in-process, SQLite, extractive summariser, FSYNC=never. Percentages are shares "
        "of payloads (first instruction, newest summary once there is one, pinned plan, cache "
        "broken) or mean recalls over payloads (user messages, paths, error lines); prefix "
        "stability and reuse are means over payloads but each replay's first. Summariser "
        "tokens: the spans the condenses summarised and their summaries, what a chat backend "
        "would read and write for them (the extractive digest costs none).",
        f"Targets of {NEW_DEFAULT.name}: first instruction, newest summary, pinned plan and user "
        "messages 100%; file paths >= 95%; error lines >= 90%; prefix reuse >= 90%; tokens "
        f"sent no more than {TODAY.name}'s.",
    ]
