"""The context_expand tool: offered in every payload format only to a task that opts in
(expand_tool: true), in that format's tool shape, and counted in the payload's tokens like the
task's own tools."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.formats import FORMATS
from app.messages.expand_tool import EXPAND_TOOL, EXPAND_TOOL_NAME
from app.tokens.counters import HeuristicCounter
from tests.support.errors import assert_error
from tests.support.payloads import served
from tests.support.tasks import append, create_task, task_body
from tests.support.threads import FORMATS as FORMAT_NAMES
from tests.support.unchanged import assert_unchanged, state

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


@pytest.fixture
def settings(context_dir: Path) -> Settings:
    return Settings(context_dir=context_dir, token_counter="heuristic")


def tool_names(payload: dict[str, Any], fmt: str) -> list[str]:
    """The names of a payload's tools, in its format's shape (Anthropic's has no function)."""
    tools = payload.get("tools") or []
    if fmt == "anthropic":
        return [tool["name"] for tool in tools]
    return [tool["function"]["name"] for tool in tools]


async def twin_tasks(client: httpx.AsyncClient) -> tuple[str, str]:
    """Two tasks alike but for expand_tool, with the same messages; (without, with)."""
    uuids = []
    for expand in (False, True):
        created = await create_task(
            client, system_prompt="You are a coding agent.", tools=[READ_FILE], expand_tool=expand
        )
        assert created["expand_tool"] is expand
        await append(client, created["uuid"], {"role": "user", "content": "Fix the parser."})
        uuids.append(created["uuid"])
    return uuids[0], uuids[1]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
async def test_only_a_task_that_opts_in_offers_the_tool(
    client: httpx.AsyncClient, fmt: str
) -> None:
    """The tool follows the task's own, in the format's shape; its definition is counted in
    the payload's tokens, which stay within the budget."""
    without, with_tool = await twin_tasks(client)

    plain = await served(client, without, fmt=fmt)
    offered = await served(client, with_tool, fmt=fmt)

    assert tool_names(plain.json(), fmt) == ["read_file"]
    assert tool_names(offered.json(), fmt) == ["read_file", EXPAND_TOOL_NAME]
    cost = FORMATS[fmt].tools_tokens(HeuristicCounter(), [EXPAND_TOOL])
    assert cost > 0
    tokens = int(offered.headers["X-Context-Tokens"])
    assert tokens == int(plain.headers["X-Context-Tokens"]) + cost
    assert tokens <= int(offered.headers["X-Context-Budget"])


async def test_the_tool_describes_the_handles(client: httpx.AsyncClient) -> None:
    _, with_tool = await twin_tasks(client)
    [_, tool] = (await served(client, with_tool)).json()["tools"]
    description = tool["function"]["description"]
    assert "hidden: 412 lines, 18.3 KB, seq 57]" in description
    assert "(seq 57, chars 2,000-14,345)" in description
    assert set(tool["function"]["parameters"]["properties"]) == {"seq", "start", "end", "max_bytes"}


async def test_a_task_without_tools_of_its_own_offers_only_the_expand_tool(
    client: httpx.AsyncClient,
) -> None:
    created = await create_task(client, system_prompt="You are a coding agent.", expand_tool=True)
    response = await served(client, created["uuid"], fmt="anthropic")
    assert tool_names(response.json(), "anthropic") == [EXPAND_TOOL_NAME]


async def test_a_tool_of_the_same_name_is_refused(
    client: httpx.AsyncClient, context_dir: Path
) -> None:
    """The service defines context_expand itself; a task's own by that name would be offered
    twice. Nothing is created."""
    before = await state(client, context_dir)
    own = {"type": "function", "function": {"name": EXPAND_TOOL_NAME}}

    response = await client.post("/tasks", json=task_body(tools=[own], expand_tool=True))

    assert_error(response, 422, "validation_error")
    assert EXPAND_TOOL_NAME in response.text
    assert_unchanged(before, await state(client, context_dir))


async def test_a_repeated_create_matches_with_the_option(client: httpx.AsyncClient) -> None:
    """The option is part of what a repeated create must repeat."""
    body = task_body(uuid="7d4cbd9b-2a36-4c0b-9a43-0d6f5d1f2a11", expand_tool=True)
    assert (await client.post("/tasks", json=body)).status_code == 201
    assert (await client.post("/tasks", json=body)).status_code == 200
    response = await client.post("/tasks", json=body | {"expand_tool": False})
    assert_error(response, 409, "task_exists")
