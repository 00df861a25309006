"""Liveness, readiness, and the error shape of requests no route answers."""

import uuid
from typing import Any

import httpx


def assert_error_shape(body: dict[str, Any], code: str) -> None:
    """The one error shape: {"error": {"code", "message", "details"}}."""
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)


async def test_healthz_is_ok(client: httpx.AsyncClient) -> None:
    """/healthz answers 200 {"status": "ok"} while the process is up."""
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_reports_every_check_ok(client: httpx.AsyncClient) -> None:
    """/readyz answers 200 when the database answers and CONTEXT_DIR is writable."""
    response = await client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert body["checks"] == {"database": "ok", "context_dir": "ok"}


async def test_unknown_route_is_404_in_error_shape(client: httpx.AsyncClient) -> None:
    """A path no route serves is a 404 in the service's error shape, not FastAPI's default."""
    response = await client.get("/no/such/route")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert_error_shape(response.json(), "not_found")


async def test_wrong_method_is_405_in_error_shape(client: httpx.AsyncClient) -> None:
    """A known path with a method it does not take is a 405 in the error shape, with Allow."""
    response = await client.put("/healthz")
    assert response.status_code == 405
    assert "GET" in response.headers.get("allow", "")
    assert_error_shape(response.json(), "method_not_allowed")

    response = await client.delete("/tasks")
    assert response.status_code == 405
    assert_error_shape(response.json(), "method_not_allowed")
    # Every method of the path, not only the first route's (GET and POST /tasks are two).
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    response = await client.put(f"/tasks/{uuid.uuid4()}")
    assert set(response.headers["allow"].split(", ")) == {"DELETE", "GET", "HEAD"}
