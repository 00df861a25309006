"""Rendering and validating payloads of every format, for tests here and elsewhere.

Rendering: ``render``/``render_json`` feed messages, as the store writes them, to a fresh
renderer; ``adjustment`` is what the stored per-message sum exceeds a served payload's count by,
per the formats' documented rules (zero for openai/lmstudio).

Validating: its provider's schema, its SDK's types, its pairing rules.

- openai/lmstudio: ``tests.support.schemas`` (OpenAI's JSON Schema and the openai SDK).
- anthropic: the SDK-derived JSON Schema and ``MessageCreateParamsNonStreaming`` through a
  pydantic TypeAdapter, lazy ``Iterable`` lists forced (``/work/shared/schemas/README.md``);
  then the API's sequence rules, which no schema states.
- ollama: the hand-written ``/api/chat`` schema; then pairing by ``tool_call_id``/``tool_name``.
"""

import dataclasses
import functools
from typing import Any

import orjson
import pydantic
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from app.context.records import current_line
from app.formats import FORMATS
from app.formats.anthropic import (
    IDS_AS_POSTED,
    NO_RESULT,
    PER_BLOCK,
    STANDALONE_ID,
    SYSTEM_PREFIX,
    TOOL_ID,
    VALID_ID,
)
from app.formats.parts import compact_json, content_text, parse_arguments, stand_in
from app.tokens.accounting import PER_PAYLOAD
from app.tokens.counters import HeuristicCounter, TextCounter
from tests.support.paths import SCHEMAS
from tests.support.schemas import (
    SchemaCheck,
    assert_tool_pairing,
    load_schema_check,
    raise_problems,
    schema_errors,
    sdk_errors,
    validate_openai_request,
)

ANTHROPIC_SCHEMA = SCHEMAS / "anthropic_messages_create_request.sdk-derived.schema.json"
OLLAMA_SCHEMA = SCHEMAS / "ollama_chat_request.schema.json"


METADATA: dict[str, Any] = {
    "config": {"model": "test-model"},
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a shell command.",
                "parameters": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
            },
        },
        {"type": "function", "function": {"name": "submit"}},
    ],
    "request_defaults": {"temperature": 0.2},
}
# A task created since tool ids reach Anthropic payloads as posted (METADATA: one from before).
KEEPING_IDS: dict[str, Any] = METADATA | {"tool_ids": IDS_AS_POSTED}


PNG = (  # a 1x1 PNG, base64
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def call(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(*calls: dict[str, Any], content: str | None = "") -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def current_lines(messages: list[dict[str, Any]]) -> list[bytes]:
    """The messages as the store writes them to current.jsonl (``current_line``)."""
    return [current_line(message) for message in messages]


def render(
    name: str,
    messages: list[dict[str, Any]],
    metadata: dict[str, Any] | None = None,
    *,
    lines_per_chunk: int | None = None,
    max_output_tokens: int = 1000,
    context_length: int = 8000,
) -> bytes:
    """The whole payload in format ``name``: envelope around a fresh renderer's output, fed
    ``lines_per_chunk`` lines at a time (None: everything in one chunk)."""
    payload_format = FORMATS[name]
    prefix, suffix = payload_format.envelope(
        metadata or METADATA, max_output_tokens=max_output_tokens, context_length=context_length
    )
    lines = current_lines(messages)
    step = lines_per_chunk or max(len(lines), 1)
    chunks = [b"".join(lines[i : i + step]) for i in range(0, len(lines), step)]
    renderer = payload_format.renderer(metadata or METADATA)
    body = b"".join(renderer(chunk, i == len(chunks) - 1) for i, chunk in enumerate(chunks))
    return prefix + body + suffix


def render_json(name: str, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """The payload parsed, after checking it is valid for its provider."""
    payload: dict[str, Any] = orjson.loads(render(name, messages, **kwargs))
    validate_payload(name, payload)
    return payload


def unanswered_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls of a context's last message when it is an assistant's (nothing answers them)."""
    last = messages[-1]
    return list(last.get("tool_calls") or ()) if last["role"] == "assistant" else []


def calls_left_open(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls some of whose sibling calls were answered but not they (a context cut mid-results)."""
    left: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            answered = next((c for c in waiting if c["id"] == message["tool_call_id"]), None)
            if answered is not None:
                waiting.remove(answered)
            continue
        left += waiting
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered_next = following is not None and following["role"] == "tool"
        waiting = list(message.get("tool_calls") or ()) if answered_next else []
    return left + waiting


def stored_sum(name: str, messages: list[dict[str, Any]]) -> int:
    """What the store counts, with the seed 000 heuristic, for a payload of ``messages`` in
    format ``name``: the payload's own cost, METADATA's tools and every message."""
    payload_format, counter = FORMATS[name], HeuristicCounter()
    return (
        PER_PAYLOAD
        + payload_format.tools_tokens(counter, METADATA["tools"])
        + sum(payload_format.message_tokens(counter, m) for m in messages)
    )


def anthropic_adjustment(
    counter: TextCounter, messages: list[dict[str, Any]], keep_ids: bool
) -> int:
    """Stored sum minus served count: leading system messages sent as system text (or, the
    last of a system-only context, as a "System: " user block) where the larger form was
    stored; the calls of a final assistant message, which are not sent; each tool id, stored
    as the dearer of its own and a canonical one, against the id sent; and, negative, the error
    result each call left open part-way gets."""
    anthropic = FORMATS["anthropic"]
    leading = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    adjustment = 0
    for index, message in enumerate(messages[:leading]):
        text = content_text(message["content"], non_text=stand_in)
        if not text.strip():
            continue
        demoted = leading == len(messages) and index == leading - 1
        served = PER_BLOCK + counter.count_text(SYSTEM_PREFIX + text if demoted else text)
        adjustment += anthropic.message_tokens(counter, message) - served
    for call in unanswered_calls(messages):
        function = call["function"]
        arguments = compact_json(parse_arguments(function["arguments"]))
        adjustment += PER_BLOCK + counter.count_text(dearer_id(counter, call["id"]))
        adjustment += counter.count_text(function["name"]) + counter.count_text(arguments)
    sent = sent_ids(messages, keep_ids)
    for stored, sent_id in sent.sent:
        adjustment += counter.count_text(dearer_id(counter, stored)) - counter.count_text(sent_id)
    for sent_id in sent.left_open:
        adjustment -= PER_BLOCK + counter.count_text(sent_id) + counter.count_text(NO_RESULT)
    return adjustment


def dearer_id(counter: TextCounter, stored: str) -> str:
    """The id a stored tool id is counted as: its own, when valid and dearer than canonical."""
    valid = VALID_ID.fullmatch(stored) is not None
    dearer = valid and counter.count_text(stored) > counter.count_text(STANDALONE_ID)
    return stored if dearer else STANDALONE_ID


@dataclasses.dataclass
class SentIds:
    sent: list[tuple[str, str]]  # (stored id, id sent) of every tool_use and tool_result sent
    left_open: list[str]  # the ids sent with the calls left open part-way


def sent_ids(messages: list[dict[str, Any]], keep_ids: bool) -> SentIds:
    """The reference of the renderer's ids: a stored id as it is when kept, valid and unused,
    else the next canonical id no kept one took; results take their call's."""
    final = {id(call) for call in unanswered_calls(messages)}
    used: set[str] = set()
    issued = 0
    waiting: dict[str, list[str]] = {}
    sent = SentIds(sent=[], left_open=[])
    for message in messages:
        if message["role"] == "tool":
            queue = waiting.get(message["tool_call_id"])
            if queue:
                sent.sent.append((message["tool_call_id"], queue.pop(0)))
            continue
        for call in message.get("tool_calls") or ():
            if id(call) in final:
                continue
            tool_id = call["id"]
            if not (keep_ids and VALID_ID.fullmatch(tool_id) and tool_id not in used):
                issued += 1
                while TOOL_ID.format(issued) in used:
                    issued += 1
                tool_id = TOOL_ID.format(issued)
            used.add(tool_id)
            waiting.setdefault(call["id"], []).append(tool_id)
            sent.sent.append((call["id"], tool_id))
    left = {id(call) for call in calls_left_open(messages)}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if id(call) in left:
                sent.left_open.append(next(t for s, t in sent.sent if s == call["id"]))
    return sent


def ollama_adjustment(counter: TextCounter, messages: list[dict[str, Any]]) -> int:
    """The tool_name each unanswered call paid for in advance and no result carries."""
    never = unanswered_calls(messages) + calls_left_open(messages)
    return sum(counter.count_text(call["function"]["name"]) for call in never)


def adjustment(
    name: str, counter: TextCounter, messages: list[dict[str, Any]], *, keep_ids: bool = False
) -> int:
    """Stored sum minus served count of a context in format ``name`` (the documented gaps);
    ``keep_ids``: the task keeps tool ids as posted (KEEPING_IDS, every task created now)."""
    if name == "anthropic":
        return anthropic_adjustment(counter, messages, keep_ids)
    if name == "ollama":
        return ollama_adjustment(counter, messages)
    return 0  # openai and lmstudio send the stored messages verbatim


@functools.cache
def anthropic_schema_check() -> SchemaCheck:
    return load_schema_check(ANTHROPIC_SCHEMA)


@functools.cache
def anthropic_sdk_adapter() -> pydantic.TypeAdapter[MessageCreateParamsNonStreaming]:
    return pydantic.TypeAdapter(MessageCreateParamsNonStreaming)


@functools.cache
def ollama_schema_check() -> SchemaCheck:
    return load_schema_check(OLLAMA_SCHEMA)


def validate_anthropic_request(payload: Any) -> None:
    """Fail unless the payload passes the JSON Schema and the SDK types, then the sequence rules."""
    raise_problems(
        "Anthropic messages request",
        [
            ("JSON Schema", schema_errors(payload, anthropic_schema_check())),
            ("anthropic SDK", sdk_errors(payload, anthropic_sdk_adapter())),
        ],
    )
    assert_anthropic_sequence(payload)


def assert_anthropic_sequence(payload: dict[str, Any]) -> None:
    """What the API checks beyond the schema: alternating turns, no blank text, unique valid
    ids, every tool_result first in the user turn right after its tool_use, every tool_use
    answered there, and no trailing whitespace ending a final assistant turn."""
    messages = payload["messages"]
    assert messages, "the API refuses an empty messages list"
    for block in payload.get("system") or ():
        assert block["type"] == "text", block
        assert block["text"].strip(), "blank system text"
    seen: set[str] = set()
    asked: set[str] = set()  # tool_use ids of the previous (assistant) turn
    for index, message in enumerate(messages):
        role, blocks = message["role"], message["content"]
        assert role in ("user", "assistant"), (index, role)
        assert blocks, (index, "a turn without content")
        if index:
            assert role != messages[index - 1]["role"], (index, "two turns of one role")
        answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        kinds = [b["type"] for b in blocks]
        assert kinds[: len(answered)] == ["tool_result"] * len(answered), (index, kinds)
        assert sorted(answered) == sorted(asked), (index, "results do not match", asked, answered)
        asked = set()
        for block in blocks:
            if block["type"] == "text":
                assert block["text"].strip(), (index, "blank text block")
            if block["type"] == "tool_use":
                assert role == "assistant", index
                assert VALID_ID.fullmatch(block["id"]), block["id"]
                assert block["id"] not in seen, (index, "duplicate id", block["id"])
                assert isinstance(block["input"], dict), index
                seen.add(block["id"])
                asked.add(block["id"])
    assert not asked, ("tool_use never answered", asked)
    final = messages[-1]
    if final["role"] == "assistant" and final["content"][-1]["type"] == "text":
        text = final["content"][-1]["text"]
        assert text == text.rstrip(), "a final assistant turn ends with whitespace"


def validate_ollama_request(payload: Any) -> None:
    """Fail unless the payload passes the /api/chat schema and pairs results by id and name."""
    raise_problems(
        "Ollama chat request", [("JSON Schema", schema_errors(payload, ollama_schema_check()))]
    )
    calls: dict[str, list[str]] = {}
    for index, message in enumerate(payload["messages"]):
        for call in message.get("tool_calls") or ():
            calls.setdefault(call["id"], []).append(call["function"]["name"])
        if message["role"] == "tool":
            names = calls.get(message["tool_call_id"])
            assert names, (index, "a result that answers no call", message["tool_call_id"])
            assert message["tool_name"] == names.pop(0), index


def validate_payload(name: str, payload: Any) -> None:
    """Fail unless a payload in format ``name`` is valid for its provider and pairs correctly."""
    if name in ("openai", "lmstudio"):
        validate_openai_request(payload)
        assert_tool_pairing(payload["messages"])
    elif name == "anthropic":
        validate_anthropic_request(payload)
    elif name == "ollama":
        validate_ollama_request(payload)
    else:  # pragma: no cover - a typo in a caller
        raise ValueError(name)
