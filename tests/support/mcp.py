"""The official MCP SDK's client against the service: over streamable HTTP (``/mcp`` of a real
server) or over stdio (``context-service mcp`` as a subprocess), and the two shapes a tool
call answers with: the result's structured content, or the service's error body."""

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.paths import REPO

CLI = Path(sys.executable).parent / "context-service"


@asynccontextmanager
async def http_session(base_url: str, key: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized session with the server at ``base_url``/mcp, with ``key`` as bearer."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(env: dict[str, str]) -> AsyncIterator[ClientSession]:
    """An initialized session with ``context-service mcp`` started with ``env`` added to this
    process's environment (CONTEXT_DIR, DATABASE_URL: the storage it opens)."""
    parameters = StdioServerParameters(
        command=str(CLI), args=["mcp"], env=dict(os.environ) | env, cwd=REPO
    )
    async with (
        stdio_client(parameters) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's structured answer; fails on a tool error. The text content says the same."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    text = result.content[0]
    assert text.type == "text"
    assert json.loads(text.text) == structured
    return structured


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The error body (``{"code", "message", "details"}``) of a call the service refuses."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    error: dict[str, Any] = json.loads(text.text)["error"]
    return error


async def read_json(session: ClientSession, uri: str) -> dict[str, Any]:
    """A resource's JSON content."""
    result = await session.read_resource(uri)
    (content,) = result.contents
    assert content.mime_type == "application/json"
    assert hasattr(content, "text")
    body: dict[str, Any] = json.loads(content.text)
    return body
