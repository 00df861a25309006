"""OpenAI and LM Studio payloads, and the registry."""

from typing import Any

import orjson
import pytest

from app.formats import FORMATS, counting_format, native_format, provider_format
from app.tokens import accounting
from app.tokens.counters import HeuristicCounter
from tests.support.formats import (
    METADATA,
    assistant,
    call,
    current_lines,
    render,
    render_json,
    result,
    user,
)

pytestmark = pytest.mark.database_agnostic

COUNTER = HeuristicCounter()
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "<|endoftext|>", "name": "alice"},
    assistant(call("c1")),
    result("c1", ""),
    assistant(call("c2", "submit", "")),
]


def test_openai_payload_is_the_lines_verbatim_in_an_envelope() -> None:
    body = render("openai", MESSAGES, lines_per_chunk=2)
    lines = b",".join(line.rstrip(b"\n") for line in current_lines(MESSAGES))
    tools = orjson.dumps(METADATA["tools"])
    assert body == (
        b'{"model":"test-model","messages":['
        + lines
        + b'],"tools":'
        + tools
        + b',"temperature":0.2,"max_completion_tokens":1000}'
    )


@pytest.mark.parametrize(
    ("name", "defaults", "limits"),
    [
        ("openai", {}, {"max_completion_tokens": 1000}),
        ("openai", {"max_tokens": 5}, {"max_tokens": 5}),
        ("openai", {"max_completion_tokens": 6}, {"max_completion_tokens": 6}),
        ("lmstudio", {}, {"max_tokens": 1000}),
        ("lmstudio", {"max_completion_tokens": 6}, {"max_tokens": 6}),
        ("lmstudio", {"max_tokens": 5, "max_completion_tokens": 6}, {"max_tokens": 5}),
    ],
)
def test_output_limit_key(name: str, defaults: dict[str, Any], limits: dict[str, int]) -> None:
    """LM Studio gets max_tokens, OpenAI max_completion_tokens unless told otherwise."""
    metadata = {"config": {"model": "m"}, "request_defaults": {"stop": ["END"], **defaults}}
    payload = render_json(name, [user("hi")], metadata=metadata)
    assert {k: v for k, v in payload.items() if k.startswith("max_")} == limits
    assert payload["stop"] == ["END"]


@pytest.mark.parametrize("name", ["openai", "lmstudio"])
def test_counts_are_todays_accounting(name: str) -> None:
    payload_format = FORMATS[name]
    payload = render_json(name, MESSAGES)
    assert payload["messages"] == MESSAGES
    expected = (
        accounting.PER_PAYLOAD
        + accounting.tools_tokens(COUNTER, METADATA["tools"])
        + sum(accounting.message_tokens(COUNTER, m) for m in MESSAGES)
    )
    assert payload_format.payload_tokens(COUNTER, payload) == expected
    assert payload_format.tools_tokens(COUNTER, METADATA["tools"]) == accounting.tools_tokens(
        COUNTER, METADATA["tools"]
    )
    assert [payload_format.message_tokens(COUNTER, m) for m in MESSAGES] == [
        accounting.message_tokens(COUNTER, m) for m in MESSAGES
    ]


def test_registry() -> None:
    assert sorted(FORMATS) == ["anthropic", "lmstudio", "ollama", "openai"]
    assert all(FORMATS[name].name == name for name in FORMATS)
    assert {name: counting_format(name) for name in FORMATS} == {
        "openai": "openai",
        "lmstudio": "openai",
        "anthropic": "anthropic",
        "ollama": "ollama",
    }


@pytest.mark.parametrize(
    ("provider", "payload", "counted"),
    [
        ("openai", "openai", "openai"),
        ("Anthropic", "anthropic", "anthropic"),
        ("ollama", "ollama", "ollama"),
        ("lm-studio", "lmstudio", "openai"),
        ("vllm", "openai", "openai"),
        (None, "openai", "openai"),
    ],
)
def test_provider_formats(provider: str | None, payload: str, counted: str) -> None:
    assert provider_format(provider) == payload
    assert native_format(provider) == counted
