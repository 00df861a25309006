"""Matching a resent conversation with the stored one: hashes that ignore how a client library
spells a message, and the common prefix."""

from typing import Any

import pytest

from app.proxy.matching import Sync, compare, message_hash


def call(arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "ls", "arguments": arguments}}


@pytest.mark.parametrize(
    ("stored", "resent"),
    [
        (
            {"role": "assistant", "content": None, "tool_calls": [call("{}")]},
            {"role": "assistant", "content": "", "tool_calls": [call("{}")]},
        ),
        (
            {"role": "user", "content": "ab"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ),
        (
            {"role": "assistant", "tool_calls": [call('{"b": 1, "a": [1, 2]}')]},
            {"role": "assistant", "tool_calls": [call('{"a":[1,2],"b":1}')]},
        ),
        (
            {"role": "assistant", "content": "hi", "usage": {"prompt_tokens": 9}, "seq": 4},
            {"role": "assistant", "content": "hi", "refusal": None, "annotations": []},
        ),
    ],
    ids=["none-is-empty", "parts-joined", "arguments-reordered", "answer-fields-ignored"],
)
def test_the_same_message_however_spelt_hashes_the_same(
    stored: dict[str, Any], resent: dict[str, Any]
) -> None:
    assert message_hash(stored) == message_hash(resent)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"role": "user", "content": "a"}, {"role": "user", "content": "b"}),
        ({"role": "user", "content": "a"}, {"role": "assistant", "content": "a"}),
        (
            {"role": "assistant", "tool_calls": [call("{}")]},
            {"role": "assistant", "tool_calls": [call("{}", "call_2")]},
        ),
        (
            {"role": "assistant", "tool_calls": [call('{"a": 1}')]},
            {"role": "assistant", "tool_calls": [call('{"a": 2}')]},
        ),
        (
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
            {"role": "tool", "tool_call_id": "c2", "content": "x"},
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:a"}}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:b"}}]},
        ),
    ],
    ids=["text", "role", "call-id", "arguments", "result-of", "image"],
)
def test_a_different_message_hashes_differently(one: dict[str, Any], other: dict[str, Any]) -> None:
    assert message_hash(one) != message_hash(other)


def test_arguments_that_are_not_json_are_compared_as_they_are() -> None:
    broken = {"role": "assistant", "tool_calls": [call("{not json")]}
    assert message_hash(broken) == message_hash(dict(broken))
    assert message_hash(broken) != message_hash({"role": "assistant", "tool_calls": [call("{}")]})


@pytest.mark.parametrize(
    ("stored", "incoming", "expected"),
    [
        ([], ["a", "b"], Sync(common=0, diverged=False)),
        (["a"], ["a", "b", "c"], Sync(common=1, diverged=False)),
        (["a", "b"], ["a", "b"], Sync(common=2, diverged=False)),
        (["a", "b", "c"], ["a", "b"], Sync(common=2, diverged=True)),
        (["a", "x", "c"], ["a", "b", "c"], Sync(common=1, diverged=True)),
        (["x"], ["a"], Sync(common=0, diverged=True)),
    ],
    ids=["new", "grown", "same", "truncated", "edited", "replaced"],
)
def test_compare(stored: list[str], incoming: list[str], expected: Sync) -> None:
    assert compare(stored, incoming) == expected
