"""Pure ASGI middlewares: request latency for /metrics, and the task uuid for the logs.

Neither touches the body: messages pass through as they come, so streamed payloads stay
streamed.
"""

import re
import time
from uuid import UUID

from fastapi import FastAPI
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import task_context
from app.observability.metrics import Metrics

__all__ = ["RequestMetricsMiddleware", "TaskLogContextMiddleware", "route_template"]

UNMATCHED = "unmatched"
_TASK_PATH = re.compile(r"^/tasks/([^/]+)")
_TEMPLATES = "route_templates"  # app.state attribute: the compiled templates, built once


class RequestMetricsMiddleware:
    """Observes each HTTP request's latency by method, route template and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = scope.get("state", {}).get("services") if scope["type"] == "http" else None
        if services is None:  # not HTTP, or no lifespan has run: nothing to count into
            await self.app(scope, receive, send)
            return
        metrics: Metrics = services.metrics
        status = 500  # what the server answers when the app raises before responding

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, observed_send)
        finally:
            seconds = time.perf_counter() - started
            metrics.request(scope["method"], route_template(scope), status, seconds)


def route_template(scope: Scope) -> str:
    """The path template of the route that handled the request (``/tasks/{uuid}``), never the
    raw path, so the label's values stay few; "unmatched" when no route fits."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    if "app" in scope:
        # Answered before routing (a body over the limit) or by no route: match the path
        # against the documented templates (FastAPI's own route objects are internal).
        for regex, template in _templates(scope["app"]):
            if regex.match(scope["path"]):
                return template
    return UNMATCHED


def _templates(app: FastAPI) -> list[tuple[re.Pattern[str], str]]:
    compiled: list[tuple[re.Pattern[str], str]] | None = getattr(app.state, _TEMPLATES, None)
    if compiled is None:
        compiled = [(compile_path(path)[0], path) for path in app.openapi()["paths"]]
        setattr(app.state, _TEMPLATES, compiled)
    return compiled


class TaskLogContextMiddleware:
    """Lines logged while a request on ``/tasks/{uuid}...`` is handled carry that uuid."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task_uuid = _task_uuid(scope["path"]) if scope["type"] == "http" else None
        if task_uuid is None:
            await self.app(scope, receive, send)
            return
        with task_context(task_uuid):
            await self.app(scope, receive, send)


def _task_uuid(path: str) -> str | None:
    """The canonical uuid in a task path (as the endpoints see it), None if there is none."""
    found = _TASK_PATH.match(path)
    if found is None:
        return None
    try:
        return str(UUID(found.group(1)))
    except ValueError:
        return None
