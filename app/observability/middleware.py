"""Pure ASGI middlewares: request latency for /metrics, and the task uuid for the logs.

Neither touches the body: messages pass through as they come, so streamed payloads stay
streamed.
"""

import re
import time
from collections.abc import Iterable
from uuid import UUID

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability.logs import task_context
from app.observability.metrics import Metrics

__all__ = ["RequestMetricsMiddleware", "TaskLogContextMiddleware"]

UNMATCHED = "unmatched"
_TASK_PATH = re.compile(r"^/tasks/([^/]+)")


class RequestMetricsMiddleware:
    """Observes each HTTP request's latency by method, route template and status.

    ``templates`` (``/tasks/{uuid}``) label the requests answered before routing (a body over
    the limit, a missing key): the path is matched against them, never used raw, so the
    label's values stay few.
    """

    def __init__(self, app: ASGIApp, templates: Iterable[str] = ()) -> None:
        self.app = app
        self.templates = [(compile_path(path)[0], path) for path in templates]

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
            metrics.request(scope["method"], self._route_template(scope), status, seconds)

    def _route_template(self, scope: Scope) -> str:
        """The path template of the route that handled the request; "unmatched" when no
        route fits."""
        path = getattr(scope.get("route"), "path", None)
        if isinstance(path, str):
            return path
        # Answered before routing, or by no route.
        for regex, template in self.templates:
            if regex.match(scope["path"]):
                return template
        return UNMATCHED


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
