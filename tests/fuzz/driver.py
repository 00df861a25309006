"""Plays a conversation against the real app (real files, SQLite, its lifespan; over
httpx's ASGI transport) and checks the invariants after every step, in every context of the
task (its root and each thread the conversation started).

A failure is a :class:`FuzzFailure`: the conversation's seed, the step it broke at, the steps
and the requests made so far, and what broke. Replaying the seed replays the same requests.
"""

import asyncio
import json
import sys
import time
import traceback
import uuid as uuids
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.budgets.windows import MIN_WINDOW
from app.config import Settings
from app.storage.layout import context_dir as context_directory
from tests.fuzz.invariants import (
    Broken,
    Ledger,
    check_history,
    check_jobs,
    check_markers,
    check_payload,
    check_rebuild,
    check_unchanged,
    files_of,
    head_row,
    jobs_of,
    require,
)
from tests.fuzz.model import Conversation
from tests.support.app import running_app
from tests.support.files import task_dir

DATABASE = "tasks.db"  # SQLite's file in the context directory
KiB = 1024
MAX_MESSAGE_BYTES = 128 * KiB
MAX_BODY_BYTES = 512 * KiB
SETTLE_S = 60.0
# Deep nesting (up to ~1100 levels) must go through the client's and the checks' own
# JSON encoders and comparisons, which recurse.
RECURSION_LIMIT = 6000
LATE_ANSWER = "result, answered late"


def fuzz_settings(context_dir: Path) -> Settings:
    """Fast and small: no fsync, background jobs at once, limits a fuzzer can reach."""
    return Settings(
        context_dir=context_dir,
        database_url="",
        storage={"fsync": "never"},
        job={"backoff_s": 0, "max_attempts": 1},
        limits={"max_message_bytes": MAX_MESSAGE_BYTES, "max_body_bytes": MAX_BODY_BYTES},
    )


@dataclass(repr=False)  # the steps can be huge and deeply nested
class FuzzFailure(Exception):
    conversation: Conversation
    step: int  # index into its steps
    trace: list[str]
    cause: str

    @property
    def seed(self) -> int:
        return self.conversation.seed

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.conversation.steps

    def __repr__(self) -> str:
        return f"FuzzFailure(seed={self.seed}, step={self.step})"

    def __str__(self) -> str:
        return (
            f"conversation seed {self.seed} broke at step {self.step}: {self.cause}\n"
            f"replay: {self.conversation.replay}\n"
            f"steps (long strings shortened):\n"
            + "\n".join(f"  {i}: {abridged(s)}" for i, s in enumerate(self.steps[: self.step + 1]))
            + "\nrequests:\n"
            + "\n".join(f"  {line}" for line in self.trace[-40:])
        )

    @property
    def signature(self) -> str:
        """What kind of failure: the step's op and the cause without numbers."""
        op = self.steps[self.step].get("op", "?")
        kind = self.steps[self.step].get("kind", "")
        first = self.cause.splitlines()[0].split(": {")[0].split(" (")[0]
        cause = "".join("#" if c.isdigit() else c for c in first)[:160]
        return f"{op}{'/' + kind if kind else ''}: {cause}"


@dataclass
class Outcome:
    steps: int = 0
    statuses: Counter[str] = field(default_factory=Counter)


def abridged(value: Any, limit: int = 80) -> str:
    def shorten(item: Any, depth: int = 0) -> Any:
        if depth > 8:
            return "..."
        if isinstance(item, str) and len(item) > limit:
            return item[:limit] + f"...({len(item)} chars)"
        if isinstance(item, list):
            return [shorten(x, depth + 1) for x in item]
        if isinstance(item, dict):
            return {k: shorten(v, depth + 1) for k, v in item.items()}
        return item

    return json.dumps(shorten(value), ensure_ascii=True)


def encode(body: Any) -> bytes:
    """JSON as a client sends it; \\u-escaped only when it must be (lone surrogates)."""
    text = json.dumps(body, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, ensure_ascii=True).encode("ascii")


@contextmanager
def deep_recursion() -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


async def play(conversation: Conversation, context_dir: Path) -> Outcome:
    """Play every step; raise FuzzFailure at the first broken invariant or unexpected answer."""
    player = _Player(conversation, context_dir)
    with deep_recursion():
        try:
            await player.start()
            for index, step in enumerate(conversation.steps):
                player.trace.append(f"-- step {index}: {step['op']}")
                try:
                    await player.play(step)
                    await player.check_store()
                except Exception as exc:  # a broken promise, or the app's own exception
                    cause = str(exc) if isinstance(exc, Broken) else _raised(exc)
                    raise FuzzFailure(conversation, index, player.trace, cause) from exc
                player.outcome.steps += 1
            player.outcome.statuses.update(player.markers)
        finally:
            await player.stop()
    return player.outcome


@dataclass
class _Context:
    """What the conversation knows of one context of its task: the root (thread 0) or a
    thread."""

    thread_id: int
    directory: Path
    window: int
    parent: int | None = None
    depth: int = 0
    active: bool = True
    ledger: Ledger = field(default_factory=Ledger)
    current_messages: int = 0
    marker_seqs: list[int] = field(default_factory=list)
    markers: Counter[str] = field(default_factory=Counter)  # the history's markers by kind
    keyed: dict[str, tuple[Any, dict[str, Any]]] = field(default_factory=dict)
    last_key: str | None = None

    @property
    def params(self) -> dict[str, str]:
        """The query that addresses this context."""
        return {"thread_id": str(self.thread_id)} if self.thread_id else {}


class _Player:
    def __init__(self, conversation: Conversation, context_dir: Path) -> None:
        self.conversation = conversation
        self.settings = fuzz_settings(context_dir)
        self.context_dir = context_dir
        self.app_stack: AsyncExitStack | None = None
        self.client: httpx.AsyncClient | None = None
        self.uuid = ""
        self.directory = context_dir
        self.contexts: dict[int, _Context] = {}
        self.here = 0  # the context the steps play in
        self.budget = 0
        self.max_depth = 0
        self.trace: list[str] = []
        self.outcome = Outcome()

    @property
    def context(self) -> _Context:
        return self.contexts[self.here]

    @property
    def markers(self) -> Counter[str]:
        """The markers of every context's history, by kind."""
        return sum((c.markers for c in self.contexts.values()), Counter())

    @property
    def database(self) -> Path:
        return self.context_dir / DATABASE

    @property
    def http(self) -> httpx.AsyncClient:
        assert self.client is not None
        return self.client

    # -- the app's life

    async def start(self) -> None:
        self.app_stack = AsyncExitStack()
        self.client = await self.app_stack.enter_async_context(running_app(self.settings))
        if not self.uuid:
            response = await self.send("POST", "/tasks", body=self.conversation.task)
            require(response.status_code == 201, f"task not created: {response.text[:500]}")
            self.uuid = response.json()["uuid"]
            self.directory = task_dir(self.context_dir, self.uuid)
            root = _Context(0, self.directory, self.conversation.task["context_length"])
            root.ledger.acknowledge([1], [{"role": "system", "content": "You are a coding agent."}])
            self.contexts[0] = root
            self.max_depth = min(3, self.settings.threads.max_depth)  # 3: a body's default
            await self.check_store()

    async def stop(self) -> None:
        if self.app_stack is not None:
            await self.app_stack.aclose()
            self.app_stack = None

    # -- requests

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        content = raw if raw is not None else (encode(body) if body is not None else None)
        sent = dict(headers or {})
        if content is not None:
            sent["content-type"] = "application/json"
        response = await self.http.request(
            method, path, content=content, params=params, headers=sent
        )
        code = ""
        if response.status_code >= 400 and response.headers.get("content-type", "").startswith(
            "application/json"
        ):
            code = response.json().get("error", {}).get("code", "")
        size = f" ({len(content)} bytes)" if content is not None else ""
        query = f"?{'&'.join(f'{k}={v}' for k, v in params.items())}" if params else ""
        self.trace.append(f"{method} {path}{query}{size} -> {response.status_code} {code}".rstrip())
        where = " (a thread)" if params and "thread_id" in params else ""
        self.outcome.statuses[
            f"{method} {_route(path)}{where} {response.status_code} {code}".rstrip()
        ] += 1
        require(
            response.status_code < 500,
            f"{method} {path}: {response.status_code} {response.text[:800]}",
        )
        return response

    def state(self) -> tuple[dict[str, bytes], dict[int, dict[str, Any]]]:
        """The task's files and the heads of its contexts."""
        heads = {t: head_row(self.database, self.uuid, t) for t in self.contexts}
        return files_of(self.directory), heads

    async def write(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request that may write: if refused (4xx), it must have written nothing."""
        await self.settle()
        before = self.state()
        response = await self.send(method, path, **kwargs)
        if 400 <= response.status_code < 500:
            check_unchanged(before, self.state(), f"{method} {path}")
        return response

    async def append(
        self, body: Any, key: str | None = None, *, allowed: tuple[int, ...] = (201,)
    ) -> httpx.Response:
        """POST messages; calls still open (a partial group, a rewind that re-opened them) are
        answered first, as an agent would, and the post retried."""
        headers = {"Idempotency-Key": key} if key else None
        path = f"/tasks/{self.uuid}/messages"
        context = self.context
        params = context.params
        if not context.active:  # a thread ended: refused, or its body refused first
            allowed = (409, 413, 422)
        response = await self.write("POST", path, body=body, headers=headers, params=params)
        if response.status_code == 409 and _code(response) == "tool_results_pending":
            open_calls = response.json()["error"]["details"]["open"]
            answers = [
                {"role": "tool", "tool_call_id": call_id, "content": LATE_ANSWER}
                for call_id in open_calls
            ]
            await self.append({"messages": answers})
            response = await self.write("POST", path, body=body, headers=headers, params=params)
        require(
            response.status_code in allowed,
            f"append answered {response.status_code}, expected {allowed}: {response.text[:800]}",
        )
        if not context.active and response.status_code == 409:
            require(_code(response) == "thread_not_active", f"append: {response.text[:800]}")
        if response.status_code == 201:
            messages = body.get("messages", [body])
            replayed = response.headers.get("idempotent-replayed") == "true"
            require(not replayed, "a first post was answered as a replay")
            context.ledger.acknowledge(response.json()["seqs"], messages)
            if key:
                context.keyed[key] = (body, response.json())
                context.last_key = key
        return response

    async def settle(self) -> None:
        """Wait until the task's background jobs (a condense an append scheduled) are done,
        none failed, and the heads appends left pending are in the database (a read of the
        task writes them)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            jobs = jobs_of(self.database, self.uuid)
            if all(job["status"] not in ("queued", "running") for job in jobs):
                check_jobs(jobs)
                response = await self.http.get(f"/tasks/{self.uuid}")
                require(response.status_code == 200, f"GET /tasks/{{uuid}}: {response.status_code}")
                return
            require(time.monotonic() < deadline, f"jobs never settled: {jobs}")
            await asyncio.sleep(0.01)

    # -- checks

    async def check_store(self) -> None:
        await self.settle()
        response = await self.http.get(f"/tasks/{self.uuid}")
        require(response.status_code == 200, f"GET /tasks/{{uuid}}: {response.status_code}")
        task = response.json()
        compactions = 0
        for context in self.contexts.values():
            where = f"context {context.thread_id}: "
            try:
                records = check_history(context.directory, context.ledger)
                head = check_rebuild(
                    context.directory, records, self.database, self.uuid, context.thread_id
                )
                compactions += check_markers(context.directory, records)
            except Broken as exc:
                raise Broken(where + str(exc)) from exc
            context.current_messages = head.current_messages
            markers = [r for r in records if "marker" in r]
            context.marker_seqs = [r["seq"] for r in markers]
            context.markers = Counter(f"marker {r['marker']}" for r in markers)
            if context.thread_id == 0:
                root = task["context"]
                require(
                    (root["messages"], root["last_seq"]) == (head.current_messages, head.last_seq),
                    f"GET /tasks says {root}, the files {head}",
                )
                self.budget = root["budget"]
        counted = task["statistics"]["compression_count"]
        require(
            counted == compactions,
            f"{compactions} compaction markers in the contexts, compression_count {counted}",
        )

    # -- steps

    async def play(self, step: dict[str, Any]) -> None:
        await getattr(self, "step_" + step["op"])(step)

    async def step_append(self, step: dict[str, Any]) -> None:
        size = len(encode(step["body"]))
        allowed = (201, 413) if size > MAX_MESSAGE_BYTES // 8 else (201,)
        await self.append(step["body"], step.get("key"), allowed=allowed)

    async def step_tools(self, step: dict[str, Any]) -> None:
        assistant, results = step["assistant"], step["results"]
        allowed = (201, 413) if len(encode(step)) > MAX_MESSAGE_BYTES // 8 else (201,)
        if step["mode"] == "batch":
            await self.append({"messages": [assistant, *results]}, allowed=allowed)
            return
        response = await self.append(assistant, allowed=allowed)
        if response.status_code == 201:
            for result in results:
                await self.append(result, allowed=allowed)

    async def step_hostile(self, step: dict[str, Any]) -> None:
        # Stored verbatim, or refused (and then nothing written): both keep the promises.
        await self.append(step["body"], allowed=(201, 409, 413, 422))

    async def step_bad(self, step: dict[str, Any]) -> None:
        kind = step["kind"]
        messages = f"/tasks/{self.uuid}/messages"
        params = self.context.params
        call = {"id": "call_bad", "type": "function", "function": {"name": "bash", "arguments": ""}}
        bodies: dict[str, Any] = {
            "unknown_call": {"role": "tool", "tool_call_id": "call_nobody", "content": "x"},
            "tool_without_id": {"role": "tool", "content": "x"},
            "bad_role": {"role": "robot", "content": "x"},
            "empty_batch": {"messages": []},
            "content_not_text": {"role": "user", "content": 42},
            "empty_assistant": {"role": "assistant"},
            "body_too_large": {"role": "user", "content": "x" * (MAX_BODY_BYTES + 10)},
            "batch_bad_tail": {"messages": [step["filler"], step["filler"], {"role": "user"}]},
            "batch_unanswered": {
                "messages": [{"role": "assistant", "tool_calls": [call]}, step["filler"]]
            },
            "tool_calls_on_user": {"role": "user", "content": "x", "tool_calls": [call]},
        }
        if kind in bodies:
            response = await self.write("POST", messages, body=bodies[kind], params=params)
        elif kind == "not_json":
            raw = b'{"role": "user", "content": '
            response = await self.write("POST", messages, raw=raw, params=params)
        elif kind == "rewind_bad_seq":
            # Out of range, a string, a non-boolean flag: the filler's length picks which.
            bodies_bad = ({"to_seq": 0}, {"to_seq": "3"}, {"to_seq": 1, "include_target": "yes"})
            body = bodies_bad[len(step["filler"]["content"]) % len(bodies_bad)]
            path = f"/tasks/{self.uuid}/rewind"
            response = await self.write("POST", path, body=body, params=params)
        elif kind == "compress_bad_strategy":
            body = {"strategy": "shred"}
            path = f"/tasks/{self.uuid}/compress"
            response = await self.write("POST", path, body=body, params=params)
        else:  # unknown_task
            path = f"/tasks/{uuids.uuid4()}/messages"
            response = await self.write("POST", path, body=step["filler"])
        require(
            400 <= response.status_code < 500,
            f"bad request {kind} answered {response.status_code}: {response.text[:800]}",
        )

    async def step_retry(self, step: dict[str, Any]) -> None:
        context = self.context
        key = context.last_key
        if key is None or not context.active:
            return
        body, first = context.keyed[key]
        path = f"/tasks/{self.uuid}/messages"
        headers = {"Idempotency-Key": key}
        params = context.params
        await self.settle()
        before = self.state()
        if step["same_body"]:
            response = await self.send("POST", path, body=body, headers=headers, params=params)
            require(response.status_code == 201, f"a replay answered {response.status_code}")
            require(response.json()["seqs"] == first["seqs"], "a replay gave other seqs")
            require(response.headers.get("idempotent-replayed") == "true", "a replay not marked so")
            check_unchanged(before, self.state(), "a replay")
        else:
            other = {"role": "user", "content": f"another body for {key}"}
            response = await self.send("POST", path, body=other, headers=headers, params=params)
            require(response.status_code == 422, f"a reused key answered {response.status_code}")
            check_unchanged(before, self.state(), "a reused key")

    async def step_compress(self, step: dict[str, Any]) -> None:
        path = f"/tasks/{self.uuid}/compress"
        body = {"strategy": step["strategy"]}
        response = await self.write("POST", path, body=body, params=self.context.params)
        if not self.context.active:
            answered = (response.status_code, _code(response))
            require(answered == (409, "thread_not_active"), f"compress: {response.text[:800]}")
            return
        require(response.status_code == 200, f"compress: {response.status_code} {response.text}")
        result = response.json()
        if result["kind"] != "skipped":
            require(
                result["tokens_after"] < result["tokens_before"],
                f"a compaction that did not shrink the context: {result}",
            )

    async def step_request(self, step: dict[str, Any]) -> None:
        name = step["format"]
        path = f"/tasks/{self.uuid}/request"
        params = {"format": name, **self.context.params}
        response = await self.send("GET", path, params=params)
        if response.status_code == 409 and _code(response) == "context_empty":
            await self.check_store()
            require(self.context.current_messages == 0, "context_empty for a context with messages")
            return
        if response.status_code == 413 and not self.context.active:
            # An ended thread takes no writes, so no compaction: over its budget, it has no
            # payload to give (still, nothing else may go wrong).
            require(_code(response) == "context_over_budget", f"request: {response.text[:800]}")
            return
        require(response.status_code == 200, f"request: {response.status_code} {response.text}")
        check_payload(name, response.json(), response.headers, self.budget)
        if self.here:  # the thread's own messages within its share of the budget
            thread = int(response.headers["x-thread-tokens"])
            share = int(response.headers["x-thread-budget"])
            require(thread <= share, f"{name}: the thread's {thread} tokens over its {share}")

    async def step_context(self, step: dict[str, Any]) -> None:
        path = f"/tasks/{self.uuid}/context"
        params = {"format": step["format"], **self.context.params}
        response = await self.send("GET", path, params=params)
        require(response.status_code == 200, f"context: {response.status_code} {response.text}")
        view = response.json()
        files = self.context.current_messages
        require(
            view["message_count"] == len(view["messages"]) == files,
            f"context view of {view['message_count']} messages, files {files}",
        )

    async def step_rewind(self, step: dict[str, Any]) -> None:
        pick, target = step["pick"], step["target"]
        context = self.context
        if not context.active:
            return
        if target == "message":
            targets = context.ledger.message_seqs[1:]  # the system prompt: see "first"
            if not targets:
                return
            to_seq, expected = targets[pick % len(targets)], 200
        elif target == "first":
            if not context.ledger.message_seqs:  # a thread's context before its first append
                return
            to_seq, expected = context.ledger.message_seqs[0], 200
        elif target == "marker":
            if not context.marker_seqs:
                return
            to_seq, expected = context.marker_seqs[pick % len(context.marker_seqs)], 422
        else:
            to_seq, expected = context.ledger.issued + 1 + pick % 5, 422
        body = {"to_seq": to_seq, "include_target": step["include_target"]}
        path = f"/tasks/{self.uuid}/rewind"
        response = await self.write("POST", path, body=body, params=context.params)
        require(
            response.status_code == expected,
            f"rewind to {to_seq}: {response.status_code}, expected {expected}: {response.text}",
        )

    async def step_restart(self, step: dict[str, Any]) -> None:
        await self.stop()
        await self.start()

    async def step_thread(self, step: dict[str, Any]) -> None:
        """A thread under the context the conversation is in, which it goes into; under a
        thread no longer active, past the deepest a thread may be, with a window under a
        context's least, or while the parent waits for tool results, refused."""
        parent = self.context
        body: dict[str, Any] = {"parent_thread_id": parent.thread_id}
        if step["window_ratio"] is not None:
            body["window_ratio"] = step["window_ratio"]
        ratio = step["window_ratio"] or self.settings.threads.default_window_ratio
        window = int(parent.window * ratio)
        response = await self.write("POST", f"/tasks/{self.uuid}/threads", body=body)
        if not parent.active:
            expected = {(409, "thread_not_active")}
        elif parent.depth >= self.max_depth:
            expected = {(409, "thread_depth_exceeded")}
        elif window < MIN_WINDOW:
            expected = {(422, "thread_window_too_small")}
        else:
            expected = {(201, ""), (409, "tool_results_pending")}
        answered = (response.status_code, _code(response) if response.status_code >= 400 else "")
        require(
            answered in expected,
            f"thread of {window} tokens under {parent.thread_id} (depth {parent.depth}): "
            f"{answered}, expected {expected}: {response.text[:800]}",
        )
        if response.status_code != 201:
            return
        thread_id = response.json()["thread_id"]
        require(thread_id not in self.contexts, f"thread id {thread_id} given twice")
        directory = context_directory(self.directory, thread_id)
        self.contexts[thread_id] = _Context(
            thread_id, directory, window, parent=parent.thread_id, depth=parent.depth + 1
        )
        self.here = thread_id

    async def step_end_thread(self, step: dict[str, Any]) -> None:
        """End (or abort) the thread the conversation is in and go back to its parent. Ended
        already, or with threads still active under it, refused."""
        context = self.context
        if context.parent is None:
            return
        verb = "abort" if step["abort"] else "end"
        path = f"/tasks/{self.uuid}/threads/{context.thread_id}/{verb}"
        response = await self.write("POST", path, body={})
        children = [c for c in self.contexts.values() if c.parent == context.thread_id]
        if not context.active:
            expected = (409, "thread_not_active")
        elif any(c.active for c in children):
            expected = (409, "thread_has_active_children")
        else:
            expected = (200, "")
        answered = (response.status_code, _code(response) if response.status_code >= 400 else "")
        require(
            answered == expected,
            f"{verb} thread {context.thread_id}: {answered}, expected {expected}: "
            f"{response.text[:800]}",
        )
        if response.status_code == 200:
            context.active = False
            self.here = context.parent

    async def step_switch(self, step: dict[str, Any]) -> None:
        """To another context, active or not (what a context no longer active takes is
        refused, writing nothing)."""
        ids = sorted(self.contexts)
        self.here = ids[step["pick"] % len(ids)]


def _raised(exc: Exception) -> str:
    """An exception the app let out (httpx's ASGI transport re-raises it: a 500 in
    production), with where the app's code raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/app/" in f.filename] or frames
    where = ", ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in ours[-3:])
    return f"raised {type(exc).__name__}: {str(exc)[:300]} (at {where})"


def _code(response: httpx.Response) -> str:
    code: str = response.json().get("error", {}).get("code", "")
    return code


def _route(path: str) -> str:
    parts = path.split("/")
    return "/".join("{uuid}" if len(p) == 36 else p for p in parts)
