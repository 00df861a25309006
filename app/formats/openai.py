"""OpenAI chat completions (``POST /v1/chat/completions``). Pure.

``current.jsonl`` already holds one OpenAI message per line, so the request is an envelope
around those lines joined with commas: no message is ever parsed or held whole.

Counting: ``app.tokens.accounting`` (OpenAI's published per-message framing) plus
``PER_PAYLOAD``; the payload is the stored messages verbatim, so the sum is exact.
"""

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from app.tokens import accounting
from app.tokens.counters import TextCounter


def join_lines(chunk: bytes, last: bool) -> bytes:
    """JSONL bytes as the inside of a JSON array (no raw newline occurs inside a line)."""
    joined = chunk.replace(b"\n", b",")
    return joined[:-1] if last else joined


class OpenAIFormat:
    name = "openai"
    counted_as = "openai"

    def envelope(
        self, metadata: dict[str, Any], *, max_output_tokens: int, context_length: int
    ) -> tuple[bytes, bytes]:
        """The bytes before and after the messages (the window is not part of the request)."""
        prefix = b'{"model":' + orjson.dumps(metadata["config"]["model"]) + b',"messages":['
        suffix = bytearray(b"]")
        if metadata.get("tools"):
            suffix += b',"tools":' + orjson.dumps(metadata["tools"])
        for key, value in self.defaults(metadata, max_output_tokens).items():
            suffix += b"," + orjson.dumps(key) + b":" + orjson.dumps(value)
        suffix += b"}"
        return prefix, bytes(suffix)

    def defaults(self, metadata: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
        defaults: dict[str, Any] = dict(metadata.get("request_defaults") or {})
        if "max_tokens" not in defaults:
            # The budget reserves this much for the answer; make the request honour it.
            defaults.setdefault("max_completion_tokens", max_output_tokens)
        return defaults

    def renderer(self, metadata: dict[str, Any]) -> Callable[[bytes, bool], bytes]:
        return join_lines  # stateless: every call is already fresh

    def message_tokens(self, counter: TextCounter, message: dict[str, Any]) -> int:
        return accounting.message_tokens(counter, message)

    def tools_tokens(self, counter: TextCounter, tools: list[dict[str, Any]] | None) -> int:
        return accounting.tools_tokens(counter, tools)

    def payload_tokens(self, counter: TextCounter, payload: dict[str, Any]) -> int:
        messages = sum(accounting.message_tokens(counter, m) for m in payload["messages"])
        tools = accounting.tools_tokens(counter, payload.get("tools"))
        return accounting.PER_PAYLOAD + messages + tools

    def open_calls_tokens(self, counter: TextCounter, open_calls: Sequence[str]) -> int:
        return 0  # sent as they are
