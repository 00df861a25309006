"""Both wires read into the service's terms: conversations, tools, the parameters that go
upstream, and answers as the recorded message."""

from typing import Any

import pytest

from app.errors import AppError
from app.proxy.wires import WIRES, anthropic_reply, openai_reply

pytestmark = pytest.mark.database_agnostic

OPENAI = WIRES["openai"]
ANTHROPIC = WIRES["anthropic"]


def test_openai_leading_system_messages_are_the_prompt_and_answer_fields_are_dropped() -> None:
    conversation = OPENAI.conversation(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}", "parsed_arguments": {}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
                {"role": "developer", "content": "Now answer."},
            ]
        }
    )
    assert conversation.system == "Be brief.\n\nUse tools."
    assert conversation.messages == [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "system", "content": "Now answer."},
    ]


def test_anthropic_messages_are_converted_as_posted_messages_are() -> None:
    conversation = ANTHROPIC.conversation(
        {
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "x"}}],
            "messages": [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"},
                        {"type": "text", "text": "Go on."},
                    ],
                },
            ],
        }
    )
    assert conversation.system == "Be brief."
    assert [m["role"] for m in conversation.messages] == ["user", "assistant", "tool", "user"]
    assert conversation.messages[2]["tool_call_id"] == "toolu_1"


@pytest.mark.parametrize(
    ("wire", "body", "where"),
    [
        ("openai", {"messages": []}, "body.messages"),
        ("openai", {"messages": "hi"}, "body.messages"),
        ("openai", {"messages": [{"role": "system", "content": "x"}]}, "user message"),
        ("openai", {"messages": [{"role": "wizard", "content": "x"}]}, "body.messages.0"),
        ("openai", {"messages": ["hi"]}, "body.messages.0"),
        ("anthropic", {"messages": [{"role": "system", "content": "x"}]}, "body.messages.0"),
    ],
)
def test_a_conversation_that_does_not_read_is_refused_saying_where(
    wire: str, body: dict[str, Any], where: str
) -> None:
    with pytest.raises(AppError) as refused:
        WIRES[wire].conversation(body)  # type: ignore[index]
    assert refused.value.status_code == 422
    assert where in refused.value.message


def test_tools_in_the_services_shape() -> None:
    schema = {"type": "object", "properties": {}}
    assert ANTHROPIC.tools(
        {
            "tools": [
                {"name": "ls", "description": "List", "input_schema": schema},
                {"type": "web_search_20250305", "name": "web_search"},
            ]
        }
    ) == [
        {
            "type": "function",
            "function": {"name": "ls", "parameters": schema, "description": "List"},
        }
    ]
    function = {"name": "ls", "parameters": schema}
    assert OPENAI.tools({"tools": [{"type": "function", "function": function}]}) == [
        {"type": "function", "function": function}
    ]


def test_the_requests_own_parameters_go_upstream() -> None:
    body = {
        "model": "m",
        "messages": [],
        "stream": True,
        "stream_options": {},
        "temperature": 0.2,
        "tool_choice": "auto",
        "max_tokens": 9,
    }
    assert OPENAI.carried(body) == {
        "model": "m",
        "temperature": 0.2,
        "tool_choice": "auto",
        "max_tokens": 9,
    }
    assert OPENAI.max_output_tokens(body) == 9
    assert ANTHROPIC.task_uuid_field({"metadata": {"user_id": "u"}}) == "u"
    assert OPENAI.task_uuid_field({"user": "u"}) == "u"


def test_answers_become_the_recorded_message() -> None:
    assert openai_reply(
        {
            "choices": [{"message": {"role": "assistant", "content": None, "refusal": "No."}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "details": {"x": 1}},
        }
    ) == {
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "No."}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    assert anthropic_reply(
        {
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"d": "."}},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 1, "service_tier": "standard"},
        }
    ) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Listing."}],
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"d":"."}'},
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    assert openai_reply({"choices": [{"message": {"content": None}}]}) == {
        "role": "assistant",
        "content": "",
    }
