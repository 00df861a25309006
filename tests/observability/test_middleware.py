"""The ASGI middlewares on their own: bodies pass through as sent, failures are counted, the
task uuid is bound for exactly the request."""

from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Message, Receive, Scope, Send

from app.observability.logs import TASK_UUID
from app.observability.metrics import Metrics
from app.observability.middleware import RequestMetricsMiddleware, TaskLogContextMiddleware

UUID = "550e8400-e29b-41d4-a716-446655440000"


def http_scope(path: str, metrics: Metrics | None = None) -> Scope:
    scope: Scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    if metrics is not None:
        scope["state"] = {"services": SimpleNamespace(metrics=metrics)}
    return scope


async def no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def request_count(metrics: Metrics, **labels: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels == labels:
                return sample.value
    return 0.0


async def test_a_streamed_body_is_forwarded_chunk_by_chunk() -> None:
    metrics = Metrics()
    received: list[Message] = []
    forwarded_before_next: list[int] = []

    async def streaming_app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(3):
            await send({"type": "http.response.body", "body": b"%d" % n, "more_body": True})
            forwarded_before_next.append(len(received))
        await send({"type": "http.response.body", "body": b""})

    async def server_send(message: Message) -> None:
        received.append(message)

    await RequestMetricsMiddleware(streaming_app)(http_scope("/x", metrics), no_body, server_send)
    # Each chunk reached the server before the app produced the next one: nothing buffered.
    assert forwarded_before_next == [2, 3, 4]
    assert [m.get("body") for m in received[1:]] == [b"0", b"1", b"2", b""]
    labels = {"method": "GET", "route": "unmatched", "status": "200"}
    assert request_count(metrics, **labels) == 1


async def test_an_app_that_raises_is_counted_as_500() -> None:
    metrics = Metrics()

    async def failing_app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async def server_send(message: Message) -> None:
        raise AssertionError("nothing is sent")

    middleware = RequestMetricsMiddleware(failing_app)
    with pytest.raises(RuntimeError, match="boom"):
        await middleware(http_scope("/x", metrics), no_body, server_send)
    assert request_count(metrics, method="GET", route="unmatched", status="500") == 1


async def test_an_unusual_method_does_not_make_a_new_series() -> None:
    metrics = Metrics()
    metrics.request("BREW", "/x", 405, 0.001)
    assert request_count(metrics, method="OTHER", route="/x", status="405") == 1


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"/tasks/{UUID}/messages", UUID),
        (f"/tasks/{UUID.upper()}", UUID),  # canonical, as the endpoints see it
        ("/tasks/not-a-uuid/messages", None),
        ("/tasks", None),
        ("/jobs/3", None),
    ],
)
async def test_the_task_uuid_is_bound_for_the_request_only(path: str, expected: str | None) -> None:
    seen: list[str | None] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(TASK_UUID.get())

    async def server_send(message: Message) -> None:
        pass

    await TaskLogContextMiddleware(app)(http_scope(path), no_body, server_send)
    assert seen == [expected]
    assert TASK_UUID.get() is None
