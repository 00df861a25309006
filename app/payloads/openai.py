"""The OpenAI chat completions request (SPEC §5; seed 001 §5.2). Pure.

``current.jsonl`` already holds one OpenAI message per line, so the request is an envelope
around those lines joined with commas: no message is ever parsed or held whole.
"""

from typing import Any

import orjson


def envelope(metadata: dict[str, Any], max_output_tokens: int) -> tuple[bytes, bytes]:
    """The bytes before and after the messages of an OpenAI request."""
    model = metadata["config"]["model"]
    prefix = b'{"model":' + orjson.dumps(model) + b',"messages":['
    suffix = bytearray(b"]")
    if metadata.get("tools"):
        suffix += b',"tools":' + orjson.dumps(metadata["tools"])
    defaults: dict[str, Any] = dict(metadata.get("request_defaults") or {})
    if "max_tokens" not in defaults:
        # The budget reserves this much for the answer; make the request honour it.
        defaults.setdefault("max_completion_tokens", max_output_tokens)
    for key, value in defaults.items():
        suffix += b"," + orjson.dumps(key) + b":" + orjson.dumps(value)
    suffix += b"}"
    return prefix, bytes(suffix)


def join_lines(chunk: bytes, *, last: bool) -> bytes:
    """JSONL bytes as the inside of a JSON array (no raw newline occurs inside a line)."""
    joined = chunk.replace(b"\n", b",")
    return joined[:-1] if last else joined
