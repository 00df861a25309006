"""Reading a context's payload and overview in the thread tests."""

from typing import Any

import httpx


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
