"""The Ollama format: string contents, images, object arguments, tool names, options."""

import pytest

from app.formats import FORMATS
from app.formats.parts import RAW_ARGUMENTS_KEY
from app.tokens.accounting import inline_image_tokens
from app.tokens.counters import HeuristicCounter
from tests.support.formats import (
    METADATA,
    PNG,
    adjustment,
    assistant,
    call,
    render_json,
    result,
    stored_sum,
    user,
)

pytestmark = pytest.mark.database_agnostic

OLLAMA = FORMATS["ollama"]
COUNTER = HeuristicCounter()


def test_envelope_moves_sampling_into_options() -> None:
    defaults = {
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END"],
        "max_completion_tokens": 256,
        "response_format": {"type": "json_object"},
        "keep_alive": "10m",
        "parallel_tool_calls": False,
        "n": 2,
    }
    metadata = {**METADATA, "request_defaults": defaults}
    payload = render_json("ollama", [user("hi")], metadata=metadata, context_length=32000)
    assert {k: v for k, v in payload.items() if k not in ("messages", "tools")} == {
        "model": "test-model",
        "stream": False,
        "keep_alive": "10m",
        "format": "json",
        "options": {
            "temperature": 0.3,
            "top_p": 0.9,
            "seed": 7,
            "stop": ["END"],
            "num_predict": 256,
            "num_ctx": 32000,
        },
    }
    assert payload["tools"][1] == {"type": "function", "function": {"name": "submit"}}


def test_envelope_defaults_and_explicit_stream() -> None:
    metadata = {"config": {"model": "llama3.2"}, "request_defaults": {"stream": True}}
    payload = render_json("ollama", [user("hi")], metadata=metadata, max_output_tokens=99)
    assert payload == {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "options": {"num_predict": 99, "num_ctx": 8000},
    }


def test_parts_become_a_string_and_inline_images_move_to_images() -> None:
    parts = [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
        {"type": "text", "text": "<|endoftext|>"},
    ]
    messages = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, user(parts)]
    payload = render_json("ollama", messages)
    assert payload["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": "Look:\n[image: https://example.com/a.jpg]\n<|endoftext|>",
            "images": [PNG],
        },
    ]
    served = OLLAMA.payload_tokens(COUNTER, payload)
    assert stored_sum("ollama", messages) == served
    assert inline_image_tokens(PNG) > 0


def test_tool_calls_and_results_pair_by_id_and_name() -> None:
    """Results carry their call's name (current.jsonl does not store it), reused ids pair in
    order, arguments are objects; each call pays for its result's tool_name in advance."""
    messages = [
        user("go"),
        assistant(call("c1", "bash"), call("c1", "read", "{oops"), content=None),
        result("c1", "first"),
        result("c1", ""),
        assistant(call("c2", "submit", "")),
    ]
    payload = render_json("ollama", messages, lines_per_chunk=1)
    assert payload["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "function": {"name": "bash", "arguments": {"command": "ls"}}},
            {"id": "c1", "function": {"name": "read", "arguments": {RAW_ARGUMENTS_KEY: "{oops"}}},
        ],
    }
    assert payload["messages"][2:4] == [
        {"role": "tool", "content": "first", "tool_name": "bash", "tool_call_id": "c1"},
        {"role": "tool", "content": "", "tool_name": "read", "tool_call_id": "c1"},
    ]
    assert payload["messages"][4]["tool_calls"][0]["function"]["arguments"] == {}
    # Only the final, unanswered call's prepaid tool_name is not served.
    difference = stored_sum("ollama", messages) - OLLAMA.payload_tokens(COUNTER, payload)
    assert difference == COUNTER.count_text("submit")


def test_context_cut_mid_results() -> None:
    """Ollama checks no pairing: the open call stays, its prepaid tool_name is not served."""
    messages = [user("go"), assistant(call("a", "read"), call("b", "write")), result("a")]
    payload = render_json("ollama", messages)
    assert [m["role"] for m in payload["messages"]] == ["user", "assistant", "tool"]
    difference = stored_sum("ollama", messages) - OLLAMA.payload_tokens(COUNTER, payload)
    assert difference == COUNTER.count_text("write")
    assert adjustment("ollama", COUNTER, messages) == difference
