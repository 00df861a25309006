"""Requests no route answers (an unknown path, a method a path does not take) get the service's
one error shape, not FastAPI's default."""

import uuid

import httpx

from tests.support.errors import assert_error


async def test_unknown_route_is_404_in_error_shape(client: httpx.AsyncClient) -> None:
    """A path no route serves is a 404 in the service's error shape, not FastAPI's default."""
    response = await client.get("/no/such/route")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert_error(response, 404, "not_found")


async def test_wrong_method_is_405_in_error_shape(client: httpx.AsyncClient) -> None:
    """A known path with a method it does not take is a 405 in the error shape, with Allow."""
    response = await client.put("/healthz")
    assert response.status_code == 405
    assert "GET" in response.headers.get("allow", "")
    assert_error(response, 405, "method_not_allowed")

    response = await client.delete("/tasks")
    assert response.status_code == 405
    assert_error(response, 405, "method_not_allowed")
    # Every method of the path, not only the first route's (GET and POST /tasks are two).
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    response = await client.put(f"/tasks/{uuid.uuid4()}")
    assert set(response.headers["allow"].split(", ")) == {"DELETE", "GET", "HEAD"}
