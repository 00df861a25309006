"""The real app (real SQLite or PostgreSQL, real files) over httpx's ASGI transport, lifespan
included, for tests that need other settings than the ``client`` fixture's, or its logs."""

import io
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from app.observability.logs import ServiceHandler
from tests.support.lifespan import lifespan_of


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with these settings (lifespan included), and a client for it."""
    async with serving(create_app(settings)) as client:
        yield client


@asynccontextmanager
async def serving(application: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of this app, its lifespan run around it."""
    async with lifespan_of(application) as started:
        transport = httpx.ASGITransport(app=started)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@asynccontextmanager
async def logged_service(
    settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, io.StringIO]]:
    """The real app, its root handler writing into the StringIO yielded with the client."""
    application = create_app(settings)
    handler = next(h for h in logging.getLogger().handlers if isinstance(h, ServiceHandler))
    output = io.StringIO()
    handler.setStream(output)
    async with serving(application) as client:
        yield client, output
