"""Reversible masking end to end: a task with a small window and the expand tool gets its old
tool outputs masked; the model (the fake LLM server, through the openai SDK) calls
context_expand with the seq its placeholder names; the agent answers through the client; the
next payload is within the budget with every call answered."""

import json
import re
from typing import Any

import openai
import pytest

from context_client import EXPAND_TOOL_NAME, AsyncContextClient, NotFoundError
from context_client.expand import expand_query
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
PLACEHOLDER_SEQ = re.compile(r"\) hidden: .*, seq (\d+)\]")


def file_text(name: str) -> str:
    """~2,000 characters: a few of them overflow a 4k window."""
    return "".join(f"{name} line {i:03d}: value = {i * 7}\n" for i in range(70))


class Agent:
    """The agent's loop: ask the service for the payload, the LLM for its answer, record it,
    run the tools it calls (read_file from FILES, context_expand through the client)."""

    def __init__(self, service: AsyncContextClient, llm: openai.AsyncOpenAI, uuid: str) -> None:
        self.service, self.llm, self.uuid = service, llm, uuid
        self.results: list[dict[str, Any]] = []

    async def turn(self) -> None:
        kwargs = await self.service.request_kwargs(self.uuid, sdk="openai")
        completion = await self.llm.chat.completions.create(**kwargs)
        reply = await self.service.record_openai(self.uuid, completion)
        for call in reply.tool_calls:
            if call["function"]["name"] == EXPAND_TOOL_NAME:
                result = await self.service.expand_result(self.uuid, call)
            else:
                path = json.loads(call["function"]["arguments"])["path"]
                result = {"role": "tool", "tool_call_id": call["id"], "content": file_text(path)}
            self.results.append(dict(result))
            await self.service.append(self.uuid, result)


async def payload_messages(service: AsyncContextClient, uuid: str) -> list[dict[str, Any]]:
    payload = await service.request_payload(uuid)
    validate_payload("openai", payload)  # valid, every call answered
    assert [t["function"]["name"] for t in payload["tools"]] == ["read_file", EXPAND_TOOL_NAME]
    messages: list[dict[str, Any]] = payload["messages"]
    return messages


async def within_budget(service: AsyncContextClient, uuid: str) -> None:
    context = (await service.get_task(uuid))["context"]
    assert context is not None
    assert context["tokens"] <= context["budget"]


@pytest.fixture
async def agent(service: AsyncContextClient, fake_llm: FakeLLM) -> Any:
    created = await service.create_task(
        task_key(),
        "fake-model",
        context_length=4096,
        max_output_tokens=512,
        system_prompt="You are a coding agent.",
        tools=[READ_FILE],
        expand_tool=True,
        compaction={"tiers": ["mask", "elide"], "keep_tool_results": 1},
    )
    assert created["expand_tool"] is True
    uuid = created["uuid"]
    await service.append(uuid, {"role": "user", "content": "Find where value 343 is set."})
    async with openai.AsyncOpenAI(base_url=f"{fake_llm.base_url}/v1", api_key="k") as llm:
        yield Agent(service, llm, uuid)


async def read_until_masked(agent: Agent, fake_llm: FakeLLM) -> tuple[int, str]:
    """Read files until a payload masks one; the seq its placeholder names and the file."""
    for i in range(12):
        fake_llm.set("ok", script=[ToolUse("read_file", {"path": f"f{i}.py"})])
        await agent.turn()
        for message in await payload_messages(agent.service, agent.uuid):
            found = PLACEHOLDER_SEQ.search(message.get("content") or "")
            if message["role"] == "tool" and found:
                record = await agent.service.message_text(agent.uuid, int(found.group(1)))
                return int(found.group(1)), record["text"]
    raise AssertionError("no tool output was masked")


async def test_the_model_expands_a_masked_output_and_the_payload_still_fits(
    agent: Agent, fake_llm: FakeLLM
) -> None:
    seq, original = await read_until_masked(agent, fake_llm)
    assert original.startswith("f0.py line 000")

    fake_llm.set("ok", script=[ToolUse(EXPAND_TOOL_NAME, {"seq": seq, "max_bytes": 600})])
    await agent.turn()

    answer = agent.results[-1]["content"]
    assert answer.startswith(f"[seq {seq}, chars 0-600 of {len(original):,}]\n")
    assert original[:600] in answer
    assert f"call {EXPAND_TOOL_NAME} with seq={seq}, start=600 for the rest" in answer
    messages = await payload_messages(agent.service, agent.uuid)
    assert messages[-1]["role"] == "tool"  # the expansion, answered and paired
    await within_budget(agent.service, agent.uuid)

    # The model goes on from where the cap stopped; then answers.
    fake_llm.set(
        "ok", script=[ToolUse(EXPAND_TOOL_NAME, {"seq": seq, "start": 600}), "Found it in f0.py."]
    )
    await agent.turn()
    await agent.turn()

    assert original[600:] in agent.results[-1]["content"]
    messages = await payload_messages(agent.service, agent.uuid)
    assert messages[-1] == {"role": "assistant", "content": "Found it in f0.py."}
    await within_budget(agent.service, agent.uuid)


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"seq": 999}, "has no message 999: its seqs run from 1 to"),
        ({"seq": 2, "start": 10**6}, "is not within the text of seq 2"),
        ({"seq": "two"}, "valid integer"),
        ({}, "valid integer"),
    ],
)
async def test_a_call_the_service_refuses_is_answered_with_the_reason(
    agent: Agent, fake_llm: FakeLLM, arguments: dict[str, Any], reason: str
) -> None:
    """Every call needs its result: the model reads why, and the payload stays paired."""
    fake_llm.set("ok", script=[ToolUse(EXPAND_TOOL_NAME, arguments)])
    await agent.turn()

    answer = agent.results[-1]["content"]
    assert answer.startswith(f"[{EXPAND_TOOL_NAME} failed: ")
    assert reason in answer
    await payload_messages(agent.service, agent.uuid)


async def test_an_unknown_task_is_the_agents_error(service: AsyncContextClient) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": EXPAND_TOOL_NAME, "arguments": '{"seq": 1}'},
    }
    with pytest.raises(NotFoundError) as raised:
        await service.expand_result("00000000-0000-4000-8000-000000000000", call)
    assert raised.value.code == "task_not_found"


def test_only_an_expand_call_is_answered() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    with pytest.raises(ValueError, match="not a context_expand call"):
        expand_query(call)
