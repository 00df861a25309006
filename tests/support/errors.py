"""The one error shape every refusal answers in."""

from typing import Any

import httpx


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is ``status`` in exactly the one error shape (JSON ``{"error": {"code",
    "message", "details"}}``), with ``code`` if given; returns the error's details."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == {"code", "message", "details"}, body
    assert isinstance(error["code"], str)
    assert error["code"]
    if code is not None:
        assert error["code"] == code, body
    assert isinstance(error["message"], str)
    assert error["message"]
    details: dict[str, Any] = error["details"]
    assert isinstance(details, dict)
    return details
