"""The validators themselves: they accept a good payload and cannot silently pass a bad one."""

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.formats import validate_anthropic_request, validate_ollama_request

pytestmark = pytest.mark.database_agnostic  # touches no database

ANTHROPIC_GOOD: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "system": [{"type": "text", "text": "You are a coding agent."}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix a.py"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1"},
                {"type": "text", "text": "Go on."},
            ],
        },
    ],
}

OLLAMA_GOOD: dict[str, Any] = {
    "model": "llama3.2",
    "messages": [
        {"role": "user", "content": "Fix a.py"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "read", "arguments": {"p": "a"}}}],
        },
        {"role": "tool", "content": "x = 1", "tool_name": "read", "tool_call_id": "c1"},
    ],
    "options": {"num_ctx": 8000},
}


Defect = Callable[[dict[str, Any]], Any]  # breaks a good payload in place


def _set(path: list[Any], value: Any) -> Defect:
    def change(payload: dict[str, Any]) -> None:
        node = payload
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def _drop_result(payload: dict[str, Any]) -> None:
    del payload["messages"][2]["content"][0]


def _swap_result_and_text(payload: dict[str, Any]) -> None:
    payload["messages"][2]["content"].reverse()


ANTHROPIC_BAD: dict[str, Defect] = {
    "openai_tool_message": _set(["messages", 2], {"role": "tool", "content": "x"}),
    "input_as_string": _set(["messages", 1, "content", 1, "input"], '{"path": "a.py"}'),
    "missing_max_tokens": lambda p: p.pop("max_tokens"),
    "unanswered_tool_use": _drop_result,
    "result_after_text": _swap_result_and_text,
    "blank_text": _set(["messages", 0, "content", 0, "text"], " "),
    "bad_id": _set(["messages", 1, "content", 1, "id"], "call 1"),
    "two_user_turns": _set(["messages", 1], {"role": "user", "content": "again"}),
    "trailing_whitespace": lambda p: p["messages"].append(
        {"role": "assistant", "content": [{"type": "text", "text": "Done.\n"}]}
    ),
}

OLLAMA_BAD: dict[str, Defect] = {
    "content_parts": _set(["messages", 0, "content"], [{"type": "text", "text": "x"}]),
    "arguments_as_string": _set(
        ["messages", 1, "tool_calls", 0, "function", "arguments"], '{"p": "a"}'
    ),
    "wrong_tool_name": _set(["messages", 2, "tool_name"], "write"),
    "orphan_result": _set(["messages", 2, "tool_call_id"], "c9"),
    "developer_role": _set(["messages", 0, "role"], "developer"),
}


def test_good_payloads_pass() -> None:
    validate_anthropic_request(ANTHROPIC_GOOD)
    validate_ollama_request(OLLAMA_GOOD)


@pytest.mark.parametrize("defect", sorted(ANTHROPIC_BAD))
def test_anthropic_defects_are_caught(defect: str) -> None:
    payload = copy.deepcopy(ANTHROPIC_GOOD)
    ANTHROPIC_BAD[defect](payload)
    with pytest.raises(AssertionError):
        validate_anthropic_request(payload)


@pytest.mark.parametrize("defect", sorted(OLLAMA_BAD))
def test_ollama_defects_are_caught(defect: str) -> None:
    payload = copy.deepcopy(OLLAMA_GOOD)
    OLLAMA_BAD[defect](payload)
    with pytest.raises(AssertionError):
        validate_ollama_request(payload)
