"""Fixtures of the client's tests: the async client in front of the real app (in-process)."""

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from context_client import AsyncContextClient


@pytest.fixture
async def service(app: FastAPI) -> AsyncIterator[AsyncContextClient]:
    """The async client of the real app (the ``app`` fixture), over httpx's ASGI transport."""
    transport = httpx.ASGITransport(app=app)
    async with AsyncContextClient("http://test", transport=transport) as client:
        yield client
