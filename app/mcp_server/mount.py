"""/mcp, its server made on the first request that reaches it.

Importing the MCP SDK is about a third of a process's start (~1 s on a slow machine, most of
it the protocol's pydantic models) and making the server ~40 ms of every app's: a service that
no agent reaches over MCP pays neither. The first request to /mcp imports it in a worker
thread (the event loop goes on serving), makes the server and starts its session manager in a
task the lifespan owns (the manager's task group must be entered and left in one task); every
request after it goes straight to the server's route.
"""

import asyncio
import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

PATH = "/mcp"
MODULE = "app.mcp_server.http"  # imports the SDK: only ever named here


class LazyMCP:
    """An ASGI app for the /mcp route; :meth:`running` is for the app's lifespan."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        # Both made by each run of the lifespan, in its event loop: an app may be started
        # again (tests do), and the server of a run before is gone with its session manager.
        self._wanted: asyncio.Event | None = None
        self._route: asyncio.Future[BaseRoute] | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the app runs: /mcp is served from its first request on."""
        wanted, stop = asyncio.Event(), asyncio.Event()
        route: asyncio.Future[BaseRoute] = asyncio.get_running_loop().create_future()
        self._wanted, self._route = wanted, route
        keeper = asyncio.create_task(self._keep(wanted, route, stop))
        try:
            yield
        finally:
            stop.set()
            if not wanted.is_set():
                keeper.cancel()
            with suppress(asyncio.CancelledError):
                await keeper
            self._wanted = self._route = None

    async def _keep(
        self, wanted: asyncio.Event, route: "asyncio.Future[BaseRoute]", stop: asyncio.Event
    ) -> None:
        await wanted.wait()
        try:
            http = await asyncio.to_thread(importlib.import_module, MODULE)
            server, served = http.app_server(self.max_body_bytes)
        except Exception as exc:  # each request to /mcp fails with it (a 500)
            route.set_exception(exc)
            return
        async with server.session_manager.run():
            route.set_result(served)
            await stop.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._wanted is None or self._route is None:
            raise RuntimeError("/mcp is served while the app's lifespan runs")
        self._wanted.set()
        served = await asyncio.shield(self._route)
        await served.handle(scope, receive, send)
