"""A real HTTP chat server on 127.0.0.1 for the LLM backend tests, speaking three wire formats.

    POST /v1/chat/completions   OpenAI-compatible  -> choices[0].message.content
    POST /api/chat              Ollama (stream false) -> message.content
    POST /v1/messages           Anthropic Messages -> content[] blocks of type "text"

OpenAI's and Anthropic's paths also stream (``"stream": true``): the same answer as server-sent
events in the format's own shape (OpenAI's chunks, then the usage chunk when
``stream_options.include_usage`` asks for it, then ``[DONE]``; Anthropic's message_start,
content block events, message_delta with the usage, message_stop), texts and tool arguments
cut into several deltas.

It runs uvicorn in a background thread on a port the OS picked. Its behaviour is set on the
:class:`FakeLLM` the ``fake_llm`` fixture yields, and applies to every path:

    ok       200 with ``text`` in the format of the path (or ``reply`` verbatim, when set);
             a request a real server would refuse (no model, no messages, a system turn
             or no max_tokens for Anthropic, streaming to Ollama) gets 400 instead
    error    ``fail_status`` (500) with the format's error JSON (+ Retry-After if ``retry_after``)
    flaky    ``failures`` times as "error", then as "ok"
    reject   400 with the format's error JSON
             (both with ``error_message`` as the message, when set)
    empty    200, well-formed, with an empty text
    garbage  200 with a body that is not JSON
    hang     no answer until the server stops (then 503)

``script`` scripts a conversation: each "ok" answer takes its next turn, a text or a
:class:`ToolUse` (the model calls that tool), rendered in the format of the path, with the
format's usage; once it is empty the answers are as above.

``delay`` (seconds) is waited before any answer. Every request is recorded (path, lower-case
headers, JSON body) before the behaviour applies. Stopping (or :meth:`FakeLLM.reset`) wakes every
waiting handler, so the server stops promptly with "hang" requests in flight.

Tests use the fixture with ``from tests.fakes.llm_server import fake_llm  # noqa: F401``.
"""

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.threaded import serve_in_thread

__all__ = [
    "Behaviour",
    "FakeLLM",
    "RecordedRequest",
    "ToolUse",
    "fake_llm",
    "running_fake_llm",
]

Behaviour = Literal["ok", "error", "flaky", "reject", "empty", "garbage", "hang"]

OPENAI_PATH = "/v1/chat/completions"
OLLAMA_PATH = "/api/chat"
ANTHROPIC_PATH = "/v1/messages"
_POLL_S = 0.02


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON, None when the body was not JSON


@dataclass(frozen=True)
class ToolUse:
    """A scripted turn: the model calls the tool ``name`` with ``arguments``."""

    name: str
    arguments: dict[str, Any]


Turn = str | ToolUse


@dataclass
class FakeLLM:
    """The server's behaviour (set it freely between calls) and what it has received."""

    behaviour: Behaviour = "ok"
    text: str = "This is the summary."
    reply: dict[str, Any] | None = None
    script: list[Turn] = field(default_factory=list)
    failures: int = 0
    fail_status: int = 500
    retry_after: str | None = None
    error_message: str | None = None
    delay: float = 0.0
    base_url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    _failed: int = 0
    _generation: int = 0

    def reset(self) -> None:
        """Back to the defaults with no requests; wakes the handlers still waiting ("hang")."""
        with self._lock:
            for spec in fields(self):
                if spec.name.startswith("_") or spec.name == "base_url":
                    continue
                if spec.default_factory is not MISSING:
                    setattr(self, spec.name, spec.default_factory())
                else:
                    setattr(self, spec.name, spec.default)
            self._failed = 0
            self._generation += 1

    def set(self, behaviour: Behaviour, **options: Any) -> None:
        """Switch behaviour (and any other field, e.g. ``failures=2``); restarts the flaky count."""
        with self._lock:
            self.behaviour = behaviour
            for name, value in options.items():
                if not hasattr(self, name) or name.startswith("_"):
                    raise AttributeError(name)
                setattr(self, name, value)
            self._failed = 0

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    @property
    def last(self) -> RecordedRequest:
        with self._lock:
            return self.requests[-1]

    # Server side -----------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        path = request.url.path
        with self._lock:
            self.requests.append(RecordedRequest(path, dict(request.headers.items()), body))
            behaviour = self.behaviour
            if behaviour == "flaky":
                behaviour = "error" if self._failed < self.failures else "ok"
                self._failed += 1
            generation = self._generation
        await self._sleep(self.delay, generation)
        if behaviour == "hang":
            await self._sleep(float("inf"), generation)
            return _error(path, 503, "server stopping")
        if behaviour == "error":
            headers = {"retry-after": self.retry_after} if self.retry_after else None
            message = self.error_message or "internal error"
            return _error(path, self.fail_status, message, headers)
        if behaviour == "reject":
            return _error(path, 400, self.error_message or "invalid request")
        if behaviour == "garbage":
            return Response(b"<html>502 Bad Gateway</html>", 200, media_type="text/html")
        problem = _invalid(path, body)
        if problem:
            return _error(path, 400, problem)
        with self._lock:
            turn = self.script.pop(0) if self.script else None
            answered = len(self.requests)  # makes each scripted call's id unique
        if turn is None and self.reply is not None:
            return JSONResponse(self.reply)
        if turn is None:
            turn = "" if behaviour == "empty" else self.text
        answer = answer_of(path, str(body.get("model")), turn, answered)
        if body.get("stream") is True:
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            events = (
                openai_events(answer, usage) if path == OPENAI_PATH else anthropic_events(answer)
            )
            return StreamingResponse(_sent(events), media_type="text/event-stream")
        return JSONResponse(answer)

    async def _sleep(self, seconds: float, generation: int) -> None:
        """Sleep up to ``seconds``, waking as soon as the server stops or is reset."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._stopping.is_set() or self._generation != generation:
                return
            await asyncio.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))


def _invalid(path: str, body: Any) -> str | None:
    """Why a real server would refuse this request body, or None."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not body.get("model") or not isinstance(body.get("messages"), list) or not body["messages"]:
        return "model and messages are required"
    if body.get("stream") and path == OLLAMA_PATH:
        return "this fake does not stream Ollama's answers"
    if path == ANTHROPIC_PATH:
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: field required"
        if any(m.get("role") not in ("user", "assistant") for m in body["messages"]):
            return "messages: roles must be user or assistant (system goes top-level)"
        if "system" in body and not isinstance(body["system"], str | list):
            return "system: must be a string or a list of blocks"
    if path == OLLAMA_PATH and body.get("stream") is not False:
        return "this fake needs stream false"
    return None


def answer_of(path: str, model: str, turn: Turn, number: int) -> dict[str, Any]:
    """A 200 answer in the path's format: the text, or the tool call (its id from ``number``)."""
    if path == OPENAI_PATH:
        message: dict[str, Any] = {"role": "assistant", "content": turn, "refusal": None}
        if isinstance(turn, ToolUse):
            call = {"name": turn.name, "arguments": json.dumps(turn.arguments)}
            message["content"] = None
            message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if isinstance(turn, ToolUse) else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    if path == OLLAMA_PATH:
        message = {"role": "assistant", "content": turn}
        if isinstance(turn, ToolUse):  # Ollama's calls carry no id
            message["content"] = ""
            message["tool_calls"] = [{"function": {"name": turn.name, "arguments": turn.arguments}}]
        return {
            "model": model,
            "created_at": "2024-01-01T00:00:00Z",
            "message": message,
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 10,
            "eval_count": 5,
        }
    block: dict[str, Any] = {"type": "text", "text": turn}
    if isinstance(turn, ToolUse):
        block = {"type": "tool_use", "id": f"toolu_{number}", "name": turn.name}
        block["input"] = turn.arguments
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": "tool_use" if isinstance(turn, ToolUse) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _pieces(text: str, size: int = 7) -> list[str]:
    """A text cut as a stream delivers it, in several deltas."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def openai_events(answer: dict[str, Any], usage: bool) -> list[bytes]:
    """A chat completion as OpenAI streams it: chunks of deltas, [DONE] last."""
    choice = answer["choices"][0]
    message = choice["message"]
    head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(message["content"]) if message["content"] else ():
        chunks.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        opening["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [opening]}))
        for piece in _pieces(function["arguments"]):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append(head | {"choices": [], "usage": answer["usage"]})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def anthropic_events(answer: dict[str, Any]) -> list[bytes]:
    """A message as Anthropic streams it: message_start, each block's start, deltas and stop,
    message_delta (the stop reason, the output tokens), message_stop."""
    usage = answer["usage"]
    start = answer | {"content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in _pieces(json.dumps(block["input"]))
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
    events.append(
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


async def _sent(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event
        await asyncio.sleep(0)  # each event its own write, as a real stream sends them


def _error(
    path: str, status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, Any]
    if path == OLLAMA_PATH:
        body = {"error": message}
    elif path == ANTHROPIC_PATH:
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        body = {"error": {"message": message, "type": "server_error", "code": None}}
    return JSONResponse(body, status, headers=headers)


@contextlib.contextmanager
def running_fake_llm() -> Iterator[FakeLLM]:
    """Start the server, yield its :class:`FakeLLM` (``base_url`` set), stop it on exit."""
    fake = FakeLLM()
    routes = [Route(p, fake.handle, methods=["POST"]) for p in (OPENAI_PATH, OLLAMA_PATH)]
    routes.append(Route(ANTHROPIC_PATH, fake.handle, methods=["POST"]))
    with serve_in_thread(Starlette(routes=routes), "fake-llm", fake._stopping.set) as base_url:
        fake.base_url = base_url
        yield fake


_shared: dict[str, FakeLLM] = {}


@pytest.fixture
def fake_llm(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """The fake LLM server, reset for this test (see the module docstring).

    One server serves the whole session (starting one costs ~0.3 s); it is stopped when the
    session ends. Each test gets it with the defaults and no recorded requests, and the
    handlers a test left waiting are woken when it ends.
    """
    fake = _shared.get("fake")
    if fake is None:
        stack = contextlib.ExitStack()
        fake = stack.enter_context(running_fake_llm())
        _shared["fake"] = fake

        def stop() -> None:
            _shared.pop("fake", None)
            stack.close()

        request.session.addfinalizer(stop)
    fake.reset()
    yield fake
    fake.reset()
