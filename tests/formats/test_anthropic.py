"""The Anthropic format on the shapes the corpus lacks or has only once."""

from typing import Any

import orjson
import pytest

from app.formats import FORMATS
from app.formats.anthropic import NO_RESULT, PER_BLOCK, STANDALONE_ID
from app.formats.parts import RAW_ARGUMENTS_KEY
from app.tokens.counters import HeuristicCounter
from tests.support.formats import (
    KEEPING_IDS,
    METADATA,
    PNG,
    adjustment,
    assistant,
    call,
    render,
    render_json,
    result,
    stored_sum,
    user,
)

pytestmark = pytest.mark.database_agnostic

ANTHROPIC = FORMATS["anthropic"]
COUNTER = HeuristicCounter()


def test_envelope_maps_defaults_and_drops_unknown_keys() -> None:
    """stop → stop_sequences, temperature into Anthropic's 0-1, OpenAI tool_choice and
    parallel_tool_calls → tool_choice, user → metadata.user_id, max_tokens honoured."""
    defaults = {
        "temperature": 1.5,
        "top_p": 0.9,
        "stop": "END",
        "max_tokens": 512,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "user": "agent-7",
        "frequency_penalty": 0.5,
        "response_format": {"type": "json_object"},
        "seed": None,
    }
    payload = render_json(
        "anthropic", [user("hi")], metadata={**METADATA, "request_defaults": defaults}
    )
    assert {k: v for k, v in payload.items() if k not in ("messages", "tools")} == {
        "model": "test-model",
        "max_tokens": 512,
        "temperature": 1,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "agent-7"},
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }
    assert payload["tools"] == [
        {
            "name": "bash",
            "description": "Run a shell command.",
            "input_schema": METADATA["tools"][0]["function"]["parameters"],
        },
        {"name": "submit", "input_schema": {"type": "object"}},
    ]


def test_envelope_defaults_without_tools() -> None:
    """max_tokens is the reserved output; a tool_choice without tools is dropped."""
    metadata = {
        "config": {"model": "m"},
        "request_defaults": {
            "tool_choice": {"type": "function", "function": {"name": "bash"}},
            "stop": ["a", "b"],
        },
    }
    payload = render_json("anthropic", [user("hi")], metadata=metadata, max_output_tokens=777)
    assert payload == {
        "model": "m",
        "max_tokens": 777,
        "stop_sequences": ["a", "b"],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    with_tools = {**metadata, "tools": METADATA["tools"]}
    chosen = render_json("anthropic", [user("hi")], metadata=with_tools)["tool_choice"]
    assert chosen == {"type": "tool", "name": "bash"}


def test_leading_system_goes_to_system_and_later_ones_stay_in_place() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        user("Fix a.py"),
        {"role": "system", "content": "Budget is low."},
        user("Go on"),
    ]
    payload = render_json("anthropic", messages)
    assert payload["system"] == [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Be brief."},
    ]
    assert payload["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fix a.py"},
                {"type": "text", "text": "System: Budget is low."},
                {"type": "text", "text": "Go on"},
            ],
        }
    ]
    # The two leading ones were stored at their "System: " cost; the later one is exact.
    saved = sum(
        COUNTER.count_text("System: " + t) - COUNTER.count_text(t)
        for t in ("You are a coding agent.", "Be brief.")
    )
    assert stored_sum("anthropic", messages) - ANTHROPIC.payload_tokens(COUNTER, payload) == saved


def test_only_system_context_still_has_a_message() -> None:
    """The API refuses empty messages: the last system message becomes a user block."""
    messages = [{"role": "system", "content": "A"}, {"role": "system", "content": "B"}]
    payload = render_json("anthropic", messages)
    assert payload["system"] == [{"type": "text", "text": "A"}]
    assert payload["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "System: B"}]}
    ]
    single = render_json("anthropic", messages[1:])
    assert "system" not in single
    assert single["messages"] == payload["messages"]
    assert stored_sum("anthropic", messages[1:]) == ANTHROPIC.payload_tokens(COUNTER, single)


def test_empty_contents_render_no_blank_block() -> None:
    """Blank texts are dropped, a message with nothing left disappears, a blank result has no
    content, and assistant text loses trailing whitespace; the sum stays exact."""
    messages = [
        {"role": "system", "content": "   "},
        user("Fix it"),
        user(""),
        assistant(call("c1"), content="\n\n"),
        result("c1", ""),
        {"role": "assistant", "content": "Done.  \n"},
        {"role": "assistant", "content": [{"type": "text", "text": " "}]},
    ]
    payload = render_json("anthropic", messages)
    assert "system" not in payload
    assert payload["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Fix it"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_00000001",
                    "name": "bash",
                    "input": {"command": "ls"},
                }
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_00000001"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    assert stored_sum("anthropic", messages) == ANTHROPIC.payload_tokens(COUNTER, payload)


def test_images_and_other_parts() -> None:
    parts = [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4="}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "spec.pdf"}},
    ]
    payload = render_json("anthropic", [user(parts)])
    assert payload["messages"][0]["content"] == [
        {"type": "text", "text": "Look:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
        {"type": "text", "text": "[image omitted: image/svg+xml]"},
        {"type": "text", "text": "[audio omitted]"},
        {"type": "text", "text": "[file omitted: spec.pdf]"},
    ]
    assert stored_sum("anthropic", [user(parts)]) == ANTHROPIC.payload_tokens(COUNTER, payload)


# Nested far deeper than JSON encoders take (orjson refuses 255 levels): kept as text.
DEEP_ARGUMENTS = '{"a": ' * 300 + "1" + "}" * 300


def test_arguments_always_become_an_object() -> None:
    messages = [
        user("go"),
        assistant(
            call("a", arguments="{not json"),
            call("b", arguments="[1, 2]"),
            call("c", arguments=""),
            call("d", arguments='{"command": "ls -la"}'),
            call("e", arguments=DEEP_ARGUMENTS),
        ),
        *(result(i) for i in "abcde"),
    ]
    payload = render_json("anthropic", messages)
    inputs = [b["input"] for b in payload["messages"][1]["content"]]
    assert inputs == [
        {RAW_ARGUMENTS_KEY: "{not json"},
        {RAW_ARGUMENTS_KEY: "[1, 2]"},
        {},
        {"command": "ls -la"},
        {RAW_ARGUMENTS_KEY: DEEP_ARGUMENTS},  # too deep for a payload to carry as an object
    ]
    assert stored_sum("anthropic", messages) == ANTHROPIC.payload_tokens(COUNTER, payload)


def test_reused_ids_become_unique_and_results_follow_them() -> None:
    messages = [
        user("go"),
        assistant(call("call_1"), call("call_1")),
        result("call_1", "first"),
        result("call_1", "second"),
        assistant(call("call_1")),
        result("call_1", "third"),
        user("<|endoftext|> is just text"),
    ]
    payload = render_json("anthropic", messages, lines_per_chunk=2)
    turns = payload["messages"]
    assert [b["id"] for b in turns[1]["content"]] == ["toolu_00000001", "toolu_00000002"]
    assert [(b["tool_use_id"], b["content"]) for b in turns[2]["content"]] == [
        ("toolu_00000001", "first"),
        ("toolu_00000002", "second"),
    ]
    assert turns[4]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_00000003", "content": "third"},
        {"type": "text", "text": "<|endoftext|> is just text"},
    ]
    assert stored_sum("anthropic", messages) == ANTHROPIC.payload_tokens(COUNTER, payload)


def test_trailing_unanswered_calls_are_dropped() -> None:
    """The text of the final assistant message stays; a calls-only one disappears."""
    with_text = [user("go"), assistant(call("x"), content="Submitting.")]
    payload = render_json("anthropic", with_text)
    assert payload["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Submitting."}],
    }
    dropped = PER_BLOCK + sum(
        COUNTER.count_text(t) for t in ("toolu_00000000", "bash", '{"command":"ls"}')
    )
    assert (
        stored_sum("anthropic", with_text) - ANTHROPIC.payload_tokens(COUNTER, payload) == dropped
    )

    calls_only = [user("go"), assistant(call("x"), content=None)]
    assert render_json("anthropic", calls_only)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]}
    ]


def test_calls_answered_part_way_get_error_results() -> None:
    messages = [user("go"), assistant(call("a"), call("b"), call("c")), result("b")]
    payload = render_json("anthropic", messages, lines_per_chunk=1)
    assert payload["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_00000002", "content": "ok"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_00000001",
            "content": NO_RESULT,
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_00000003",
            "content": NO_RESULT,
            "is_error": True,
        },
    ]
    extra = ANTHROPIC.payload_tokens(COUNTER, payload) - stored_sum("anthropic", messages)
    assert extra == ANTHROPIC.open_calls_tokens(COUNTER, ["toolu_00000001", "toolu_00000003"])
    assert adjustment("anthropic", COUNTER, messages) == -extra


def test_results_and_user_text_share_one_turn_and_names_are_dropped() -> None:
    messages = [
        {"role": "user", "content": "go", "name": "alice"},
        {"role": "assistant", "content": "Looking."},
        assistant(call("a")),
        result("a"),
        user("and then?"),
    ]
    payload = render_json("anthropic", messages)
    assert [turn["role"] for turn in payload["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in payload["messages"][1]["content"]] == ["text", "tool_use"]
    assert [b["type"] for b in payload["messages"][2]["content"]] == ["tool_result", "text"]
    assert b"alice" not in orjson.dumps(payload)
    assert stored_sum("anthropic", messages) == ANTHROPIC.payload_tokens(COUNTER, payload)


def test_no_lines_at_all_is_still_json() -> None:
    """A renderer given one empty last chunk closes what the envelope opened."""
    prefix, suffix = ANTHROPIC.envelope(METADATA, max_output_tokens=10, context_length=100)
    payload = orjson.loads(prefix + ANTHROPIC.renderer(METADATA)(b"", True) + suffix)
    assert payload["messages"] == []
    assert render("anthropic", [], max_output_tokens=10, context_length=100) == prefix + suffix


def test_calls_that_are_all_the_context_has_are_kept_and_answered() -> None:
    """A system prompt and an assistant's unanswered calls (a rewind can leave just that):
    leaving the calls out would send no message at all, which the API refuses."""
    messages = [{"role": "system", "content": "rules"}, assistant(call("x"), content=None)]
    payload = render_json("anthropic", messages)
    assert payload["system"] == [{"type": "text", "text": "rules"}]
    assert [turn["role"] for turn in payload["messages"]] == ["assistant", "user"]
    assert payload["messages"][1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_00000001",
            "content": NO_RESULT,
            "is_error": True,
        }
    ]
    extra = ANTHROPIC.payload_tokens(COUNTER, payload) - stored_sum("anthropic", messages)
    assert extra <= ANTHROPIC.open_calls_tokens(COUNTER, ["x"])


# -- tool ids ---------------------------------------------------------------------------------


def tool_ids(payload: dict[str, Any]) -> list[str]:
    """The ids of the payload's tool_use and tool_result blocks, in order."""
    return [
        block.get("id") or block["tool_use_id"]
        for turn in payload["messages"]
        for block in turn["content"]
        if block["type"] in ("tool_use", "tool_result")
    ]


def test_a_task_keeping_ids_sends_them_as_posted_but_invalid_or_reused_ones() -> None:
    """Valid ids go as posted; one Anthropic refuses, or one already used, gets the next
    canonical id that no kept id took."""
    messages = [
        user("go"),
        assistant(call("toolu_01A09q90qw90lq917835lq9"), call("toolu_00000001")),
        result("toolu_01A09q90qw90lq917835lq9"),
        result("toolu_00000001"),
        assistant(call("call.1"), call("toolu_01A09q90qw90lq917835lq9")),
        result("call.1"),
        result("toolu_01A09q90qw90lq917835lq9"),
    ]
    payload = render_json("anthropic", messages, metadata=KEEPING_IDS)
    kept, canonical = "toolu_01A09q90qw90lq917835lq9", "toolu_00000001"
    assert tool_ids(payload) == [
        *(kept, canonical, kept, canonical),
        *("toolu_00000002", "toolu_00000003", "toolu_00000002", "toolu_00000003"),
    ]
    served = ANTHROPIC.payload_tokens(COUNTER, payload)
    stored = stored_sum("anthropic", messages)
    assert stored - served == adjustment("anthropic", COUNTER, messages, keep_ids=True) >= 0


def test_a_task_from_before_kept_ids_is_served_canonical_ids() -> None:
    messages = [
        user("go"),
        assistant(call("toolu_01A09q90qw90lq917835lq9")),
        result("toolu_01A09q90qw90lq917835lq9"),
    ]
    payload = render_json("anthropic", messages, metadata=METADATA)
    assert tool_ids(payload) == ["toolu_00000001", "toolu_00000001"]


def test_an_id_is_counted_as_the_dearer_of_itself_and_a_canonical_one() -> None:
    long_id, short_id = "toolu_01A09q90qw90lq917835lq9", "c1"
    assert (
        COUNTER.count_text(long_id)
        > COUNTER.count_text(STANDALONE_ID)
        > COUNTER.count_text(short_id)
    )
    for tool_id, counted_as in ((long_id, long_id), (short_id, STANDALONE_ID)):
        message = assistant(call(tool_id))
        same_cost = assistant(call(counted_as))
        assert ANTHROPIC.message_tokens(COUNTER, message) == ANTHROPIC.message_tokens(
            COUNTER, same_cost
        )
    assert ANTHROPIC.open_calls_tokens(COUNTER, [long_id]) > ANTHROPIC.open_calls_tokens(
        COUNTER, [short_id]
    )
