"""The LLM helpers with the official SDKs against a real fake LLM server: ``request_kwargs``
makes a payload the SDK's ``create()`` sends as it is, and the ``record_*`` helpers append an
SDK's answer (tool calls, usage) so that the task's statistics count the call."""

import json
from typing import Any, Literal

import anthropic
import httpx
import openai
import pytest

from context_client import AsyncContextClient, anthropic_reply, openai_reply
from context_client.types import ToolDefinition
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM, ToolUse
from tests.support.client import task_key
from tests.support.formats import validate_payload

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

READ_FILE: ToolDefinition = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
DEFAULTS = {"temperature": 0.2, "top_k": 40}


async def new_task(service: AsyncContextClient, provider: str) -> str:
    created = await service.create_task(
        task_key(),
        "fake-model",
        llm_provider=provider,
        system_prompt="You are a coding agent.",
        tools=[READ_FILE],
        request_defaults=DEFAULTS,
    )
    await service.append(created["uuid"], {"role": "user", "content": "Read a.py"})
    return created["uuid"]


async def test_anthropic_create_takes_the_payload_as_keyword_arguments(
    service: AsyncContextClient, fake_llm: FakeLLM
) -> None:
    """anthropic's Messages.create() has no temperature or top_k parameter: the payload as
    such raises TypeError, the helper's keyword arguments send it unchanged."""
    uuid = await new_task(service, "anthropic")
    payload = await service.request_payload(uuid)
    kwargs = await service.request_kwargs(uuid, sdk="anthropic")
    assert kwargs["extra_body"] == {"temperature": 0.2, "top_k": 40}
    async with anthropic.AsyncAnthropic(base_url=fake_llm.base_url, api_key="k") as llm:
        with pytest.raises(TypeError):
            await llm.messages.create(**payload)
        await llm.messages.create(**kwargs)
    sent = fake_llm.last.body
    assert (fake_llm.last.path, sent) == ("/v1/messages", payload)
    assert sent["temperature"] == 0.2


@pytest.mark.parametrize("payload_format", ["openai", "lmstudio"])
async def test_openai_create_takes_the_payload_as_keyword_arguments(
    service: AsyncContextClient, fake_llm: FakeLLM, payload_format: Literal["openai", "lmstudio"]
) -> None:
    """openai's create() takes temperature but not top_k (a vLLM extension): top_k goes in
    extra_body, and the wire request is the payload (LM Studio's, with max_tokens, too)."""
    uuid = await new_task(service, payload_format)
    kwargs = await service.request_kwargs(uuid, sdk="openai", format=payload_format)
    assert (kwargs["temperature"], kwargs["extra_body"]) == (0.2, {"top_k": 40})
    async with openai.AsyncOpenAI(base_url=f"{fake_llm.base_url}/v1", api_key="k") as llm:
        await llm.chat.completions.create(**kwargs)
    assert fake_llm.last.body == await service.request_payload(uuid, format=payload_format)
    assert fake_llm.last.body["temperature"] == 0.2
    limit = "max_tokens" if payload_format == "lmstudio" else "max_completion_tokens"
    assert limit in fake_llm.last.body


async def test_an_openai_chat_completion_is_recorded_with_its_calls_and_usage(
    service: AsyncContextClient, fake_llm: FakeLLM
) -> None:
    uuid = await new_task(service, "openai")
    fake_llm.set("ok", script=[ToolUse("read_file", {"path": "a.py"}), "a.py is fine."])
    async with openai.AsyncOpenAI(base_url=f"{fake_llm.base_url}/v1", api_key="k") as llm:
        completion = await llm.chat.completions.create(
            **await service.request_kwargs(uuid, sdk="openai")
        )
        assert isinstance(completion, openai.types.chat.ChatCompletion)
        called = await service.record_openai(uuid, completion)
        (call,) = called.tool_calls
        assert call["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}
        await service.append(uuid, {"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        final = await service.record_openai(
            uuid,
            await llm.chat.completions.create(**await service.request_kwargs(uuid, sdk="openai")),
        )
    assert (final.text, final.tool_calls) == ("a.py is fine.", [])
    validate_payload("openai", fake_llm.last.body)
    stored = (await service.list_messages(uuid, after_seq=2))["messages"]
    assert stored[0].get("tool_calls") == called.tool_calls
    assert stored[0].get("usage") == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }
    await assert_counted(service, uuid, calls=2, tokens=30)


async def test_an_anthropic_message_is_recorded_with_its_calls_and_usage(
    service: AsyncContextClient, fake_llm: FakeLLM
) -> None:
    uuid = await new_task(service, "anthropic")
    fake_llm.set("ok", script=[ToolUse("read_file", {"path": "a.py"}), "a.py is fine."])
    async with anthropic.AsyncAnthropic(base_url=fake_llm.base_url, api_key="k") as llm:
        message = await llm.messages.create(**await service.request_kwargs(uuid, sdk="anthropic"))
        assert isinstance(message, anthropic.types.Message)
        called = await service.record_anthropic(uuid, message)
        (call,) = called.tool_calls
        assert call["id"] == message.content[0].id  # type: ignore[union-attr]
        assert json.loads(call["function"]["arguments"]) == {"path": "a.py"}
        await service.append(uuid, {"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        final = await service.record_anthropic(
            uuid,
            await llm.messages.create(**await service.request_kwargs(uuid, sdk="anthropic")),
        )
    assert final.text == "a.py is fine."
    validate_payload("anthropic", fake_llm.last.body)
    stored = (await service.list_messages(uuid, after_seq=2))["messages"][0]
    assert stored.get("usage") == {"input_tokens": 10, "output_tokens": 5}
    await assert_counted(service, uuid, calls=2, tokens=30)


async def test_an_ollama_answer_is_recorded_with_ids_for_its_calls(
    service: AsyncContextClient, fake_llm: FakeLLM
) -> None:
    """Ollama's calls carry no id: the recorded ones get theirs, which the results name."""
    uuid = await new_task(service, "ollama")
    fake_llm.set("ok", script=[ToolUse("read_file", {"path": "a.py"}), "a.py is fine."])
    async with httpx.AsyncClient(base_url=fake_llm.base_url) as llm:

        async def chat() -> dict[str, Any]:
            payload = await service.request_payload(uuid)
            response = await llm.post("/api/chat", json=payload)
            answer: dict[str, Any] = response.raise_for_status().json()
            return answer

        called = await service.record_ollama(uuid, await chat())
        (call,) = called.tool_calls
        assert call["id"].startswith("call_")
        await service.append(uuid, {"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        final = await service.record_ollama(uuid, await chat())
    assert final.text == "a.py is fine."
    validate_payload("ollama", fake_llm.last.body)
    assert fake_llm.last.body["messages"][-1]["tool_name"] == "read_file"
    stored = (await service.list_messages(uuid, after_seq=2))["messages"][0]
    assert stored.get("usage") == {"prompt_eval_count": 10, "eval_count": 5}
    await assert_counted(service, uuid, calls=2, tokens=30)


async def assert_counted(service: AsyncContextClient, uuid: str, calls: int, tokens: int) -> None:
    """The task's statistics and /stats count the recorded LLM calls and their tokens."""
    statistics = (await service.get_task(uuid))["statistics"]
    assert (statistics["llm_call_count"], statistics["total_tokens"]) == (calls, tokens)
    assert statistics["tool_call_count"] == 1
    stats = await service.get_stats()
    assert (stats["calls"]["llm_calls"], stats["tokens"]["all"]["total"]) == (calls, tokens)


def test_a_refusal_is_kept_as_a_refusal_part() -> None:
    completion = {
        "choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't."}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": None},
    }
    assert openai_reply(completion) == {
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I can't."}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


def test_a_call_the_chat_shape_cannot_hold_is_an_error() -> None:
    custom = {"id": "c1", "type": "custom", "custom": {"name": "grep", "input": "x"}}
    completion = {"choices": [{"message": {"role": "assistant", "tool_calls": [custom]}}]}
    with pytest.raises(ValueError, match="custom"):
        openai_reply(completion)


def test_anthropic_thinking_is_left_out_and_texts_are_joined() -> None:
    message = {
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Reading "},
            {"type": "text", "text": "a.py."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
        ],
        "usage": {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": None},
    }
    assert anthropic_reply(message) == {
        "role": "assistant",
        "content": "Reading a.py.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            }
        ],
        "usage": {"input_tokens": 7, "output_tokens": 3},
    }
