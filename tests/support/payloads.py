"""Reading a context's payload (GET /request) and overview (GET /context)."""

from typing import Any

import httpx

from tests.support.schemas import assert_tool_pairing

PAYLOAD_OVERHEAD = 3  # the reply primer, counted once per payload


async def served(
    client: httpx.AsyncClient, uuid: str, thread_id: int = 0, fmt: str | None = "openai"
) -> httpx.Response:
    """GET /request of a context (``fmt`` None: the task's own format); asserts 200."""
    params: dict[str, Any] = {"thread_id": thread_id}
    if fmt is not None:
        params["format"] = fmt
    response = await client.get(f"/tasks/{uuid}/request", params=params)
    assert response.status_code == 200, response.text
    return response


async def payload(client: httpx.AsyncClient, uuid: str) -> tuple[dict[str, Any], int, int]:
    """The task's payload in its own (OpenAI-shaped) format, its token count and the budget,
    asserted within it and its tool calls paired."""
    response = await served(client, uuid, fmt=None)
    tokens = int(response.headers["X-Context-Tokens"])
    budget = int(response.headers["X-Context-Budget"])
    assert tokens <= budget
    body: dict[str, Any] = response.json()
    assert_tool_pairing(body["messages"])
    return body, tokens, budget


async def context_view(
    client: httpx.AsyncClient, uuid: str, thread_id: int = 0, fmt: str | None = "openai"
) -> dict[str, Any]:
    """GET /context of a context (``fmt`` None: the task's own format); asserts 200."""
    params: dict[str, Any] = {"thread_id": thread_id}
    if fmt is not None:
        params["format"] = fmt
    response = await client.get(f"/tasks/{uuid}/context", params=params)
    assert response.status_code == 200, response.text[:2000]
    body: dict[str, Any] = response.json()
    return body


async def payload_messages(client: httpx.AsyncClient, uuid: str) -> list[dict[str, Any]]:
    """The messages of the task's ``payload`` (within the budget, calls paired)."""
    messages: list[dict[str, Any]] = (await payload(client, uuid))[0]["messages"]
    return messages
