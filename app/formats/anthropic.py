"""Anthropic Messages (``POST /v1/messages``), streamed from OpenAI-shaped lines. Pure.

How an OpenAI message becomes content blocks:

- Leading system messages (before the first other message) become the top-level ``system``
  text blocks, emitted before ``messages`` as they stream by. A later system message (a note
  an agent added mid-task) becomes a user text block ``"System: ..."`` in place: Anthropic has
  one system prompt, and moving the note there would reorder the conversation and need the
  whole context in memory. A context of system messages only would leave ``messages`` empty,
  which the API refuses, so its last system message is rendered as that user block instead.
- user/assistant content: text parts (and refusals) → text blocks; ``image_url`` data URLs of
  jpeg/png/gif/webp → base64 image blocks, http(s) URLs → URL image blocks, anything else → a
  short text placeholder. Blank text never becomes a block (the API rejects empty text blocks),
  and assistant text loses trailing whitespace (the API rejects it at the end of a final
  assistant turn, and the message's cost must not depend on where it stands).
- assistant ``tool_calls`` → ``tool_use`` blocks whose ``input`` is the parsed arguments
  object (see :func:`app.formats.parts.parse_arguments` for blank, invalid or non-object ones);
  tool messages → ``tool_result`` blocks in a user turn (blank results carry no content).
- Tool ids: a task created with ``"tool_ids": "as_posted"`` in its metadata.json (every task
  since ids were kept) keeps each call's id as posted (an Anthropic ``toolu_...`` id comes back
  as it was sent) when it is valid for Anthropic (``^[a-zA-Z0-9_-]+$``) and not yet used in the
  payload; any other id (and every id of an older task, whose messages were counted with
  canonical ids) becomes ``toolu_00000001``, ``toolu_00000002``... in payload order, skipping
  ids already used: the corpus reuses ids, and Anthropic wants them unique. The renderer
  remembers the ids it used and the calls whose results have not come yet, which maps each
  result's id.
- Consecutive messages of one role form one turn (results then a user message, say): a turn
  is opened, its blocks emitted as they come, and closed when the role changes.
- Calls are kept only when the next message is a tool result: the store lets nothing else
  follow open calls, so calls followed by anything else (the context's last message, mostly)
  will never be answered, and the API refuses unanswered ``tool_use``. (When such calls are
  all the context has besides its system prompt, they are kept and answered as below: the
  API refuses an empty ``messages`` too.) When the context ends
  after some but not all results of a message's calls, each call still open gets an
  ``is_error`` result saying none was recorded.
- A message that renders to no block is dropped; ``name`` has no Anthropic equivalent.

The request: ``max_tokens`` is the reserved output unless the defaults give ``max_tokens`` (or
``max_completion_tokens``). Of the other defaults only what Anthropic accepts is kept:
temperature (capped at Anthropic's 1), top_p, top_k, thinking, ``stop``/``stop_sequences`` as a
list, ``metadata.user_id`` (or OpenAI's ``user``), and ``tool_choice``/``parallel_tool_calls``
converted, when the task has tools. OpenAI function tools become ``name``, ``description``,
``input_schema``.

Accounting, in this format's own terms: a block costs ``PER_BLOCK`` plus its content (text;
tool_use: id + name + compact JSON of input; tool_result: id + content; image: as
:mod:`app.tokens.accounting` counts one). An id is counted as the dearer of the id as posted and
a canonical one, so the count holds whichever the renderer sends.
Turns cost nothing, so merging never changes a sum and a message's cost is known on its own.
``message_tokens`` of a system message is the larger of its two renderings. The stored sum is
thus exact except: a leading system message's cost as system text is at most that maximum;
dropped unanswered calls are not sent; an id sent may cost less than it was counted; each error
result for a call left open costs what :meth:`AnthropicFormat.open_calls_tokens` adds.
"""

import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from app.formats.parts import (
    compact_json,
    content_text,
    data_image,
    is_web_url,
    output_limit,
    parse_arguments,
    part_text,
    placeholder,
    stand_in,
)
from app.tokens.accounting import (
    IMAGE_WITHOUT_DATA,
    PER_PAYLOAD,
    inline_image_tokens,
    tools_tokens,
)
from app.tokens.counters import TextCounter

PER_BLOCK = 3
SYSTEM_PREFIX = "System: "
TOOL_ID = "toolu_{:08d}"
STANDALONE_ID = TOOL_ID.format(0)  # same cost as any canonical id
VALID_ID = re.compile(r"[a-zA-Z0-9_-]+")
IDS_AS_POSTED = "as_posted"  # metadata.json's "tool_ids" of a task whose ids are kept
NO_RESULT = "[no result was recorded]"

_CHOICES = {"auto": "auto", "required": "any", "none": "none"}  # OpenAI's string forms
_SAMPLING = ("temperature", "top_p", "top_k", "thinking")

Block = dict[str, Any]


# -- request envelope -------------------------------------------------------------------------


def request_fields(metadata: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
    """Model, output limit and the request defaults Anthropic accepts (others are dropped)."""
    given: dict[str, Any] = {
        k: v for k, v in (metadata.get("request_defaults") or {}).items() if v is not None
    }
    fields: dict[str, Any] = {
        "model": metadata["config"]["model"],
        "max_tokens": output_limit(given, max_output_tokens),
    }
    fields.update((key, given[key]) for key in _SAMPLING if key in given)
    if isinstance(fields.get("temperature"), int | float):
        fields["temperature"] = min(fields["temperature"], 1)  # OpenAI's range is 0-2
    stop = given.get("stop_sequences", given.get("stop"))
    if stop:
        fields["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    metadata_in = given.get("metadata")
    user_id = metadata_in.get("user_id") if isinstance(metadata_in, dict) else None
    if user_id or given.get("user"):
        fields["metadata"] = {"user_id": user_id or given["user"]}
    choice = tool_choice(given.get("tool_choice"), given.get("parallel_tool_calls"))
    if choice is not None and metadata.get("tools"):
        fields["tool_choice"] = choice
    return fields


def tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    """OpenAI's tool_choice (or Anthropic's own) and parallel_tool_calls as Anthropic's."""
    result: dict[str, Any] | None = None
    if isinstance(choice, str) and choice in _CHOICES:
        result = {"type": _CHOICES[choice]}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        result = {"type": "tool", "name": choice["function"]["name"]}
    elif isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"):
        result = dict(choice)
    if parallel is False:
        result = result or {"type": "auto"}
        if result["type"] != "none":
            result["disable_parallel_tool_use"] = True
    return result


def convert_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as an Anthropic tool definition."""
    function = tool["function"]
    converted: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        converted["description"] = function["description"]
    schema = dict(function.get("parameters") or {})
    schema.setdefault("type", "object")  # Anthropic requires an object schema
    converted["input_schema"] = schema
    return converted


# -- blocks -----------------------------------------------------------------------------------


def text_blocks(text: str) -> list[Block]:
    return [{"type": "text", "text": text}] if text.strip() else []


def system_text(message: dict[str, Any]) -> str | None:
    text = content_text(message.get("content"), non_text=stand_in)
    return text if text.strip() else None


def content_blocks(role: str, content: Any) -> list[Block]:
    """The blocks of a user or assistant message's content."""
    if content is None or isinstance(content, str):
        parts: list[dict[str, Any]] = [{"type": "text", "text": content or ""}]
    else:
        parts = content
    blocks: list[Block] = []
    for part in parts:
        text = part_text(part)
        if text is not None:
            blocks += text_blocks(text.rstrip() if role == "assistant" else text)
        elif part.get("type") == "image_url":
            blocks += image_blocks(part)
        else:
            blocks += text_blocks(placeholder(part))
    return blocks


def image_blocks(part: dict[str, Any]) -> list[Block]:
    url = str(part.get("image_url", {}).get("url", ""))
    inline = data_image(url)
    if inline is not None:
        source = {"type": "base64", "media_type": inline[0], "data": inline[1]}
        return [{"type": "image", "source": source}]
    if is_web_url(url):
        return [{"type": "image", "source": {"type": "url", "url": url}}]
    return text_blocks(placeholder(part))


def tool_use(call: dict[str, Any], tool_id: str) -> Block:
    function = call.get("function", {})
    return {
        "type": "tool_use",
        "id": tool_id,
        "name": function.get("name", ""),
        "input": parse_arguments(function.get("arguments") or ""),
    }


def tool_result(message: dict[str, Any], tool_id: str) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": tool_id}
    text = content_text(message.get("content"), non_text=stand_in)
    if text.strip():
        block["content"] = text
    return block


def block_tokens(counter: TextCounter, block: Block) -> int:
    """What one content block costs (see the module docstring)."""
    kind = block["type"]
    if kind == "text":
        return PER_BLOCK + counter.count_text(block["text"])
    if kind == "image":
        source = block["source"]
        data = source["data"] if source["type"] == "base64" else None
        return PER_BLOCK + (IMAGE_WITHOUT_DATA if data is None else inline_image_tokens(data))
    if kind == "tool_use":
        return (
            PER_BLOCK
            + counter.count_text(block["id"])
            + counter.count_text(block["name"])
            + counter.count_text(compact_json(block["input"]))
        )
    if kind == "tool_result":
        content = block.get("content", "")
        return PER_BLOCK + counter.count_text(block["tool_use_id"]) + counter.count_text(content)
    raise ValueError(f"this format never renders a {kind!r} block")


def _dearer_id(counter: TextCounter, stored: Any) -> str:
    """The stored id when it may be sent as it is and costs more than a canonical one, else a
    canonical one: what a block with either costs at most."""
    valid = isinstance(stored, str) and VALID_ID.fullmatch(stored) is not None
    if valid and counter.count_text(stored) > counter.count_text(STANDALONE_ID):
        return str(stored)
    return STANDALONE_ID


def _no_result(tool_id: str) -> Block:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": NO_RESULT, "is_error": True}


def _as_blocks(content: str | list[Block]) -> list[Block]:
    return text_blocks(content) if isinstance(content, str) else content


def _cost(counter: TextCounter, blocks: list[Block]) -> int:
    return sum(block_tokens(counter, block) for block in blocks)


# -- the streaming renderer -------------------------------------------------------------------

_START, _SYSTEM, _MESSAGES = 0, 1, 2  # what the renderer has opened so far


class AnthropicRenderer:
    """Turns current.jsonl chunks into ``,"system":[...],"messages":[...]``.

    Holds one message back (the lookahead), the role of the open turn and the calls still
    waiting for results: O(1) in the context's length.
    """

    def __init__(self, keep_ids: bool) -> None:
        self._pending: dict[str, Any] | None = None
        self._section = _START
        self._turn: str | None = None
        self._open: dict[str, deque[str]] = {}  # stored id -> sent ids awaiting results
        self._keep_ids = keep_ids
        self._used: set[str] = set()  # every id sent so far
        self._issued = 0

    def __call__(self, chunk: bytes, last: bool) -> bytes:
        out = bytearray()
        for line in chunk.split(b"\n"):
            if line:
                message: dict[str, Any] = orjson.loads(line)
                if self._pending is not None:
                    self._render(self._pending, message, out)
                self._pending = message
        if last:
            if self._pending is not None:
                self._render(self._pending, None, out)
                self._pending = None
            self._answer_open_calls(out)
            if self._turn is not None:
                out += b"]}"
            self._enter_messages(out)
            out += b"]"
        return bytes(out)

    def _render(
        self, message: dict[str, Any], following: dict[str, Any] | None, out: bytearray
    ) -> None:
        """Emit one message, knowing the one after it (None: it is the context's last)."""
        role = message.get("role")
        if role == "system" and self._section != _MESSAGES and following is not None:
            text = system_text(message)
            if text is not None:
                block = orjson.dumps({"type": "text", "text": text})
                out += b"," + block if self._section == _SYSTEM else b',"system":[' + block
                self._section = _SYSTEM
            return
        self._enter_messages(out)
        if role == "tool":
            tool_id = self._answer(message.get("tool_call_id", ""))
            # A result that answers no call is kept as text (the store never writes one).
            blocks = (
                [tool_result(message, tool_id)]
                if tool_id
                else text_blocks(content_text(message.get("content"), non_text=stand_in))
            )
            self._emit("user", blocks, out)
            return
        self._answer_open_calls(out)
        if role == "system":
            text = system_text(message)
            self._emit("user", text_blocks(SYSTEM_PREFIX + text) if text else [], out)
        elif role == "assistant":
            blocks = content_blocks("assistant", message.get("content"))
            answered = following is not None and following.get("role") == "tool"
            # Calls that only end the context are left out, unless they are all it has to say
            # (messages may not be empty): then they go, each answered with an is_error result.
            alone = following is None and not blocks and self._turn is None
            if answered or alone:
                blocks += [self._call(call) for call in message.get("tool_calls") or ()]
            self._emit("assistant", blocks, out)
        else:
            self._emit("user", content_blocks("user", message.get("content")), out)

    def _enter_messages(self, out: bytearray) -> None:
        if self._section == _SYSTEM:
            out += b"]"
        if self._section != _MESSAGES:
            out += b',"messages":['
            self._section = _MESSAGES

    def _emit(self, role: str, blocks: list[Block], out: bytearray) -> None:
        if not blocks:
            return
        body = b",".join(orjson.dumps(block) for block in blocks)
        if self._turn == role:
            out += b"," + body
            return
        if self._turn is not None:
            out += b"]},"
        out += b'{"role":"' + role.encode() + b'","content":[' + body
        self._turn = role

    def _call(self, call: dict[str, Any]) -> Block:
        stored = call.get("id", "")
        tool_id = stored
        if not (self._keep_ids and VALID_ID.fullmatch(stored) and stored not in self._used):
            self._issued += 1
            tool_id = TOOL_ID.format(self._issued)
            while tool_id in self._used:  # a kept id took it
                self._issued += 1
                tool_id = TOOL_ID.format(self._issued)
        self._used.add(tool_id)
        self._open.setdefault(stored, deque()).append(tool_id)
        return tool_use(call, tool_id)

    def _answer(self, call_id: str) -> str | None:
        waiting = self._open.get(call_id)
        if not waiting:
            return None
        tool_id = waiting.popleft()
        if not waiting:
            del self._open[call_id]
        return tool_id

    def _answer_open_calls(self, out: bytearray) -> None:
        """Close calls whose results stopped coming, so every tool_use has its tool_result."""
        missing = [tool_id for waiting in self._open.values() for tool_id in waiting]
        self._open.clear()
        self._emit("user", [_no_result(tool_id) for tool_id in missing], out)


class AnthropicFormat:
    name = "anthropic"
    counted_as = "anthropic"

    def envelope(
        self, metadata: dict[str, Any], *, max_output_tokens: int, context_length: int
    ) -> tuple[bytes, bytes]:
        """The request's fields up to where the renderer adds system and messages."""
        prefix = orjson.dumps(request_fields(metadata, max_output_tokens))[:-1]  # drop "}"
        tools = [convert_tool(tool) for tool in metadata.get("tools") or ()]
        suffix = b',"tools":' + orjson.dumps(tools) + b"}" if tools else b"}"
        return prefix, suffix

    def renderer(self, metadata: dict[str, Any]) -> Callable[[bytes, bool], bytes]:
        return AnthropicRenderer(keep_ids=metadata.get("tool_ids") == IDS_AS_POSTED)

    def message_tokens(self, counter: TextCounter, message: dict[str, Any]) -> int:
        """The blocks one OpenAI message renders to on its own, each id the dearer of its own
        and a canonical one."""
        role = message.get("role")
        if role == "system":
            text = system_text(message)
            if text is None:
                return 0
            as_system = _cost(counter, text_blocks(text))
            return max(as_system, _cost(counter, text_blocks(SYSTEM_PREFIX + text)))
        if role == "tool":
            tool_id = _dearer_id(counter, message.get("tool_call_id"))
            return block_tokens(counter, tool_result(message, tool_id))
        blocks = content_blocks(str(role), message.get("content"))
        blocks += [
            tool_use(call, _dearer_id(counter, call.get("id")))
            for call in message.get("tool_calls") or ()
        ]
        return _cost(counter, blocks)

    def tools_tokens(self, counter: TextCounter, tools: list[dict[str, Any]] | None) -> int:
        return tools_tokens(counter, [convert_tool(tool) for tool in tools or ()])

    def payload_tokens(self, counter: TextCounter, payload: dict[str, Any]) -> int:
        total = PER_PAYLOAD + _cost(counter, _as_blocks(payload.get("system") or []))
        for message in payload["messages"]:
            total += _cost(counter, _as_blocks(message["content"]))
        return total + tools_tokens(counter, payload.get("tools"))

    def open_calls_tokens(self, counter: TextCounter, open_calls: Sequence[str]) -> int:
        # A context cut part-way through results gets an error result for each call left open;
        # calls of a final assistant message are dropped instead (cheaper: this is the bound).
        return sum(
            block_tokens(counter, _no_result(_dearer_id(counter, call_id)))
            for call_id in open_calls
        )
