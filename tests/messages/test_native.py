"""Reading messages posted in Anthropic's or Ollama's shape into the service's (pure)."""

from typing import Any

import orjson
import pytest

from app.errors import ErrorCode, InvalidInput, RequestInvalid
from app.formats.parts import image_media_type
from app.messages.native import detect, read_body
from tests.support.formats import PNG

pytestmark = pytest.mark.database_agnostic

JPEG = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBD"
GIF = "R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="
WEBP = "UklGRiQAAABXRUJQVlA4IBgAAAAwAQCdASoBAAEAAwA0JaQAA3AA/vuUAAA="


def fields(body: Any, input_format: Any = None) -> list[dict[str, Any]]:
    return [message.fields() for message in read_body(body, input_format)]


def test_detection_reads_each_providers_marks() -> None:
    assert detect([{"role": "user", "content": "hi"}]) == {}
    assert detect([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]) == {
        "anthropic": "message 0 has a tool_result block"
    }
    assert detect([{"role": "assistant", "type": "message", "content": "x"}]) == {
        "anthropic": 'message 0 has "type": "message"'
    }
    assert detect([{"role": "user", "content": "x"}, {"role": "user", "images": [PNG]}]) == {
        "ollama": "message 1 has images"
    }
    call = {"function": {"name": "ls", "arguments": {}}}
    assert detect([{"role": "assistant", "tool_calls": [call]}]) == {
        "ollama": "message 0 has tool call arguments as an object"
    }
    assert detect([{"role": "assistant", "content": "x", "eval_count": 3}]) == {
        "ollama": "message 0 has eval_count"
    }
    image_url = {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    assert detect([{"role": "user", "content": [image_url]}]) == {
        "openai": "message 0 has an image_url part"
    }
    assert detect(["not a message", 3, None]) == {}
    odd = {"role": "user", "content": [{"type": {}}, {"type": ["image"]}, "x"], "tool_calls": 1}
    assert detect([odd]) == {}  # not a mark of anything: validation says what is wrong


def test_a_plain_body_is_the_services_own() -> None:
    body = {"role": "user", "content": "hi", "x_trace": 1}
    assert fields(body) == fields(body, "openai") == [body]


def test_anthropic_assistant_keeps_ids_names_and_input() -> None:
    posted = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading both."},
            {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "ls", "input": {}},
        ],
        "usage": {"input_tokens": 1000, "output_tokens": 30, "cache_read_input_tokens": 200},
    }
    (message,) = fields(posted)
    assert message == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Reading both."}],
        "tool_calls": [
            {
                "id": "toolu_01A",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
            },
            {"id": "toolu_01B", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
        "usage": {"input_tokens": 1000, "output_tokens": 30, "cache_read_input_tokens": 200},
        "id": "msg_01",  # a field Anthropic's shape has and OpenAI's does not: kept as posted
    }
    assert "type" not in message  # the service's own records are typed; a message may not be


def test_anthropic_results_become_tool_messages_then_the_rest() -> None:
    posted = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "def main(): ..."},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01B",
                "is_error": True,
                "content": [
                    {"type": "text", "text": "ls: cannot access"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            },
            {"type": "tool_result", "tool_use_id": "toolu_01C"},
            {"type": "text", "text": "Now fix it.", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/s.png"}},
        ],
    }
    assert fields(posted, "anthropic") == [
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "def main(): ..."},
        {
            "role": "tool",
            "tool_call_id": "toolu_01B",
            "content": [{"type": "text", "text": "ls: cannot access"}],
            "is_error": True,
        },
        {"role": "tool", "tool_call_id": "toolu_01C", "content": ""},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "text", "text": "Now fix it."},
                {"type": "image_url", "image_url": {"url": "https://example.com/s.png"}},
            ],
        },
    ]


def test_anthropic_string_contents_stay_strings() -> None:
    batch = {
        "messages": [
            {"role": "user", "content": "Fix a.py"},
            {"role": "assistant", "content": "On it."},
        ]
    }
    assert fields(batch, "anthropic") == batch["messages"]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"role": "system", "content": "x"}, "body.role"),
        (
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            "body: Value error, an assistant message cannot carry tool_result blocks",
        ),
        (
            {"role": "user", "content": [{"type": "thinking", "thinking": "hm"}]},
            "body.content",
        ),
        ({"role": "user", "content": []}, "body: Value error, content blocks must not be empty"),
        (
            {"role": "user", "content": "x", "usage": {"input_tokens": 1}},
            "body: Value error, only assistant messages carry usage",
        ),
    ],
    ids=["system_role", "result_on_assistant", "thinking", "empty", "usage_on_user"],
)
def test_anthropic_refusals_say_where(body: dict[str, Any], where: str) -> None:
    with pytest.raises(RequestInvalid) as refused:
        read_body(body, "anthropic")
    assert refused.value.message.startswith(where), refused.value.message


def test_ollama_messages_become_the_services() -> None:
    batch = {
        "messages": [
            {"role": "user", "content": "What is this?", "images": [PNG, JPEG]},
            {
                "role": "assistant",
                "content": "",
                "thinking": "look at the files",
                "tool_calls": [
                    {"function": {"name": "read_file", "arguments": {"path": "a.py"}}},
                    {"function": {"name": "read_file", "arguments": {"path": "a.py"}}},
                    {"id": "call_9", "function": {"name": "ls", "index": 2}},
                ],
                "prompt_eval_count": 1200,
                "eval_count": 40,
            },
            {"role": "tool", "tool_name": "read_file", "content": "def main(): ..."},
            {"role": "tool", "tool_call_id": "call_9", "content": "a.py"},
        ]
    }
    user, assistant, by_name, by_id = fields(batch)  # detected: images, object arguments
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
        ],
    }
    first, second, third = assistant["tool_calls"]
    assert (
        first["function"]
        == second["function"]
        == {
            "name": "read_file",
            "arguments": '{"path":"a.py"}',
        }
    )
    assert first["id"].startswith("call_")
    assert len({first["id"], second["id"], "call_9"}) == 3  # each call an id of its own
    assert third == {
        "id": "call_9",
        "type": "function",
        "function": {"name": "ls", "arguments": "{}"},
    }
    assert assistant["usage"] == {"prompt_eval_count": 1200, "eval_count": 40}
    assert assistant["thinking"] == "look at the files"  # kept as posted, like any extra
    assert assistant["content"] == ""
    # The same body gives the same ids (a retried POST is the same request).
    assert fields(batch)[1]["tool_calls"] == assistant["tool_calls"]
    assert by_name == {"role": "tool", "content": "def main(): ...", "tool_name": "read_file"}
    assert by_id == {"role": "tool", "content": "a.py", "tool_call_id": "call_9"}


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"role": "user", "images": ["bm90IGFuIGltYWdl"]}, "body.images.0"),
        ({"role": "assistant", "content": "x", "images": [PNG]}, "body: Value error, only user"),
        ({"role": "tool", "content": "x"}, "body: Value error, a tool message needs tool_name"),
        ({"role": "user", "content": "x", "eval_count": 3}, "body: Value error, only assistant"),
    ],
    ids=["not_an_image", "image_on_assistant", "tool_without_name_or_id", "counts_on_user"],
)
def test_ollama_refusals_say_where(body: dict[str, Any], where: str) -> None:
    with pytest.raises(RequestInvalid) as refused:
        read_body(body, "ollama")
    assert refused.value.message.startswith(where), refused.value.message


@pytest.mark.parametrize("body", [[{"role": "user", "content": "x"}], "x", 3, None])
def test_a_body_that_is_no_object_says_what_it_must_be(body: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        read_body(body, None)
    message = refused.value.message
    assert message.startswith("the body must be a JSON object: one message")
    assert '{"messages": [...]}' in message
    assert "single" not in message


def test_the_wrong_input_format_is_named_with_the_right_one() -> None:
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    body = {"role": "assistant", "content": [tool_use]}
    with pytest.raises(InvalidInput) as refused:
        read_body(body, "openai")
    assert refused.value.message == (
        "message 0 has a tool_use block, which OpenAI's shape does not have: this looks like "
        "an Anthropic message; post it with ?input=anthropic"
    )
    assert refused.value.details["looks_like"] == "anthropic"
    # Even where the other provider's fields would pass as extras.
    with pytest.raises(InvalidInput) as refused:
        read_body({"role": "user", "content": "x", "images": [PNG]}, "anthropic")
    assert refused.value.message.endswith("post it with ?input=ollama")


def test_a_detected_format_is_named_in_its_errors() -> None:
    body = {"role": "assistant", "content": [{"type": "tool_use", "name": "ls", "input": {}}]}
    with pytest.raises(RequestInvalid) as refused:
        read_body(body, None)
    assert refused.value.message == (
        "body.content.blocks.0.tool_use.id: Field required (read as an Anthropic message because "
        "message 0 has a tool_use block; name the format with ?input= to read it as another)"
    )


def test_mixed_shapes_are_refused_as_ambiguous() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    body = {
        "messages": [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c"}]},
        ]
    }
    with pytest.raises(InvalidInput) as refused:
        read_body(body, None)
    assert refused.value.code == ErrorCode.AMBIGUOUS_INPUT_FORMAT
    assert refused.value.details == {
        "evidence": {
            "anthropic": "message 1 has a tool_result block",
            "openai": "message 0 has tool call arguments as JSON text",
        }
    }
    assert "?input=anthropic" in refused.value.message
    # Named, the other provider's marks are what is wrong.
    with pytest.raises(InvalidInput) as refused:
        read_body(body, "anthropic")
    assert refused.value.message.endswith("post it with ?input=openai")


@pytest.mark.parametrize(
    ("data", "media_type"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_image_types_are_read_from_the_data(data: str, media_type: str) -> None:
    assert image_media_type(data) == media_type


@pytest.mark.parametrize("data", ["", "!!!", "bm90IGFuIGltYWdl", "UklGRiQAAABXQVZF"])
def test_other_data_is_no_image(data: str) -> None:
    assert image_media_type(data) is None


def test_arguments_round_trip_as_json() -> None:
    arguments = {"path": "a.py", "lines": [1, 2], "opts": {"deep": {"x": None}}, "u": "日本"}
    tool_use = {"type": "tool_use", "id": "t1", "name": "read", "input": arguments}
    (message,) = fields({"role": "assistant", "content": [tool_use]})
    assert orjson.loads(message["tool_calls"][0]["function"]["arguments"]) == arguments
